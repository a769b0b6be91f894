/* Drives the octosync C ABI the way a host language would: encode and decode frames, bad
   input and null pointers, a mirror handle. Prints one line per check; exits 1 on a failure. */
#include <stdio.h>
#include <string.h>
#include "octosync_ffi.h"

static int failures = 0;

static void expect(int ok, const char* what) {
    printf("%s %s\n", ok ? "ok" : "FAIL", what);
    if (!ok) failures++;
}

static int bytes_are(const LazilyFfiBytes* b, const char* text) {
    return b->len == strlen(text) && memcmp(b->ptr, text, b->len) == 0;
}

int main(void) {
    const char* delta = "{\"Delta\":{\"base_epoch\":1,\"epoch\":2,\"ops\":[]}}";
    const char* seed = "{\"type\":\"snapshot\",\"epoch\":3}";
    LazilyFfiMessageKind kind;
    LazilyFfiBytes frame = {0}, message = {0};

    LazilyFfiStatus s = lazily_ffi_frame_encode((const uint8_t*)delta, strlen(delta), &kind, &frame);
    expect(s == LazilyFfiStatus_Ok && kind == LazilyFfiMessageKind_Delta, "encode a delta");
    expect(frame.len == 4 + strlen(delta) && frame.ptr[3] == strlen(delta), "length prefix");

    s = lazily_ffi_frame_decode(frame.ptr, frame.len, &kind, &message);
    expect(s == LazilyFfiStatus_Ok && kind == LazilyFfiMessageKind_Delta, "decode it back");
    expect(bytes_are(&message, delta), "canonical JSON out");
    lazily_ffi_bytes_free(&message);
    expect(message.ptr == NULL && message.len == 0, "freed buffer is emptied");
    lazily_ffi_bytes_free(&message); /* a second free is harmless */

    s = lazily_ffi_frame_encode((const uint8_t*)seed, strlen(seed), &kind, &message);
    expect(s == LazilyFfiStatus_Ok && kind == LazilyFfiMessageKind_Snapshot, "seed JSON in");
    const char* tagged = "{\"Snapshot\":{\"epoch\":3,\"nodes\":[],\"edges\":[],\"roots\":[]}}";
    expect(message.len == 4 + strlen(tagged) && message.ptr[3] == strlen(tagged) &&
           memcmp(message.ptr + 4, tagged, strlen(tagged)) == 0,
           "re-encoded in the tagged dialect");
    lazily_ffi_bytes_free(&message);

    frame.ptr[3] += 1; /* the prefix now claims one byte more than there is */
    s = lazily_ffi_frame_decode(frame.ptr, frame.len, &kind, &message);
    expect(s == LazilyFfiStatus_InvalidMessage && message.ptr == NULL, "wrong length prefix");
    lazily_ffi_bytes_free(&frame);

    const char* garbage = "{\"Delta\":{\"base_epoch\":\"one\"}}";
    s = lazily_ffi_frame_encode((const uint8_t*)garbage, strlen(garbage), &kind, &frame);
    expect(s == LazilyFfiStatus_InvalidMessage && kind == LazilyFfiMessageKind_Unknown, "bad message");
    s = lazily_ffi_frame_encode((const uint8_t*)delta, 0, &kind, &frame);
    expect(s == LazilyFfiStatus_Empty, "empty input");
    s = lazily_ffi_frame_decode(NULL, 8, &kind, &message);
    expect(s == LazilyFfiStatus_NullPointer, "null input");
    s = lazily_ffi_frame_decode((const uint8_t*)delta, 8, NULL, &message);
    expect(s == LazilyFfiStatus_NullPointer, "null kind");
    s = lazily_ffi_frame_encode((const uint8_t*)delta, strlen(delta), &kind, NULL);
    expect(s == LazilyFfiStatus_NullPointer, "null output");

    LazilyFfiMirror* mirror = lazily_ffi_mirror_new();
    uint64_t epoch = 0;
    expect(mirror != NULL, "a mirror handle");
    expect(lazily_ffi_mirror_epoch(mirror, &epoch) == LazilyFfiStatus_Empty, "no epoch yet");
    const char* snap = "{\"Snapshot\":{\"epoch\":1,\"nodes\":[],\"edges\":[],\"roots\":[]}}";
    LazilyFfiBytes reply = {0};
    s = lazily_ffi_mirror_apply(mirror, (const uint8_t*)snap, strlen(snap), &kind, &reply);
    expect(s == LazilyFfiStatus_Ok && reply.len == 0, "snapshot applied, nothing to send");
    s = lazily_ffi_mirror_apply(mirror, (const uint8_t*)delta, strlen(delta), &kind, &reply);
    expect(s == LazilyFfiStatus_Ok && reply.len == 0, "delta 1->2 applied");
    const char* gap = "{\"Delta\":{\"base_epoch\":5,\"epoch\":6,\"ops\":[]}}";
    s = lazily_ffi_mirror_apply(mirror, (const uint8_t*)gap, strlen(gap), &kind, &reply);
    expect(s == LazilyFfiStatus_Ok && kind == LazilyFfiMessageKind_ResyncRequest && reply.len > 0,
           "a gap answers with a resync request");
    printf("reply %.*s\n", (int)reply.len, (const char*)reply.ptr);
    lazily_ffi_bytes_free(&reply);
    expect(lazily_ffi_mirror_epoch(mirror, &epoch) == LazilyFfiStatus_Ok && epoch == 2, "epoch 2");
    expect(lazily_ffi_mirror_apply(NULL, (const uint8_t*)snap, strlen(snap), &kind, &reply) ==
           LazilyFfiStatus_NullPointer, "null handle");
    expect(lazily_ffi_mirror_epoch(mirror, NULL) == LazilyFfiStatus_NullPointer, "null epoch");
    lazily_ffi_mirror_free(mirror);

    printf("failures %d\n", failures);
    return failures ? 1 : 0;
}
