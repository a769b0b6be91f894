"""asyncio I/O: the aiohttp application and its wire faces."""
