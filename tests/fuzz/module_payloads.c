/* Mutates a module payload and hands each copy to the loader of its kind
 * (`load_from_bytes.<kind>`): the loaders read untrusted bytes with bounds checks, and a
 * slip shows here as a crash (or, under valgrind or ASan, as an invalid read).
 *
 *   module_payloads KIND PAYLOAD_FILE CASES SEED
 *
 * Prints "<cases> cases: <n> loaded, <m> refused"; exit status 0 unless the loader is missing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorplug/c_api.h>

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s KIND PAYLOAD_FILE CASES SEED\n", argv[0]);
    return 2;
  }
  FILE* file = fopen(argv[2], "rb");
  if (!file) return 2;
  fseek(file, 0, SEEK_END);
  const long size = ftell(file);
  rewind(file);
  unsigned char* payload = malloc(size > 0 ? (size_t)size : 1);
  if (!payload || fread(payload, 1, (size_t)size, file) != (size_t)size) return 2;
  fclose(file);
  char name[256];
  snprintf(name, sizeof name, "load_from_bytes.%s", argv[1]);
  TPFunctionHandle load;
  if (TPGlobalFuncGet(name, &load) != 0) return 2;
  const int cases = atoi(argv[3]);
  int loaded = 0, refused = 0;
  srand((unsigned)atoi(argv[4]));
  for (int c = 0; c < cases; ++c) {
    const long length = c % 5 == 0 ? rand() % (size + 1) : size;  /* every fifth one cut short */
    unsigned char* copy = malloc(length > 0 ? (size_t)length : 1);
    memcpy(copy, payload, (size_t)length);
    for (int flips = 1 + rand() % 8; flips > 0 && length > 0; --flips) {
      /* a third of the flips in the first 64 bytes: the headers that locate everything else */
      const long at = rand() % 3 == 0 ? rand() % (length < 64 ? length : 64) : rand() % length;
      copy[at] = rand() % 2 ? (unsigned char)rand() : 0xff;
    }
    TPAny args[3];
    memset(args, 0, sizeof args);
    args[0].type_index = kTPOpaquePtr;
    args[0].v_ptr = copy;
    args[1].type_index = kTPInt;
    args[1].v_int64 = length;
    args[2].type_index = kTPRawStr;
    args[2].v_c_str = "fuzz";
    TPAny result;
    memset(&result, 0, sizeof result);
    if (TPFunctionCall(load, args, 3, &result) == 0) {
      ++loaded;
      TPAnyRelease(&result);
    } else {
      ++refused;
      TPErrorClear();
    }
    free(copy);
  }
  printf("%d cases: %d loaded, %d refused\n", cases, loaded, refused);
  TPFunctionRelease(load);
  free(payload);
  return 0;
}
