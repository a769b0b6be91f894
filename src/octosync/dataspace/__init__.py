"""dataspace."""
