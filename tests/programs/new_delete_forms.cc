// Every form of C++ operator new and delete, each pair from a call site of its own
// (tests/programs/sites.h), for tests/e2e_real_programs_test.cc.
//
// Usage: new_delete_forms ROUNDS LEAK
//
// Each site allocates ROUNDS blocks of its own size (and alignment) through one operator
// new form, fills and reads them back, and frees all but the last LEAK through the matching
// operator delete form; those LEAK blocks are never freed. The twelve explicit calls cover
// the eight operator new forms (plain, array, nothrow, aligned and their combinations) and
// the twelve operator delete forms (plus sized, aligned sized, nothrow); three more sites
// use new/delete expressions, where the compiler picks the form (sized delete, the array
// cookie, over-aligned types).
//
// Prints, in this order:
//   form NAME SIZE ALIGN ROUNDS LEAK   per site: the size operator new is asked for
//   checksum HEX                       over every byte written and read back
//   site NAME START END BYTES COUNT    per site (sites.h), addresses vary between runs
// Everything before the site lines is the same in every run.
#include <stdio.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <new>

#include "tests/programs/sites.h"

namespace {

constexpr int kMaxRounds = 100000;
void* g_held[kMaxRounds];  // the leaked blocks of the latest site (kept reachable)
uint64_t g_checksum = 1469598103934665603ULL;

// Writes a pattern that depends on the site and the round, and folds the bytes back into
// the checksum (FNV-1a).
void fill_and_check(void* p, size_t size, uint64_t site, uint64_t round) {
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < size; ++i) b[i] = static_cast<unsigned char>(site * 31 + round * 7 + i);
  use(p);
  for (size_t i = 0; i < size; ++i) g_checksum = (g_checksum ^ b[i]) * 1099511628211ULL;
}

struct Form {
  const char* name;
  size_t size;  // what operator new is asked for
  size_t align;
};

void report_form(const Form& f, int rounds, int leak) {
  printf("form %s %zu %zu %d %d\n", f.name, f.size, f.align, rounds, leak);
}

// A plain class, one with a destructor (new[] stores the element count in a cookie before
// the elements), and an over-aligned one.
struct Plain {
  char bytes[1013];
};
struct WithDtor {
  char bytes[338];
  ~WithDtor() { use(bytes); }
};
struct alignas(256) OverAligned {
  char bytes[1015];
};

}  // namespace

// Twelve explicit pairs, sizes 1001..1012 (distinct from everything else the program does).
#define EXPLICIT_SITE(NAME, SIZE, ALIGN, NEW_CALL, DELETE_CALL) \
  SITE(NAME) void site_##NAME(int rounds, int leak) {           \
    [[maybe_unused]] const size_t n = SIZE;                     \
    [[maybe_unused]] const std::align_val_t al{ALIGN};          \
    for (int i = 0; i < rounds; ++i) {                          \
      void* p = NEW_CALL;                                       \
      if (!p) abort();                                          \
      fill_and_check(p, n, SIZE, static_cast<uint64_t>(i));     \
      if (i < rounds - leak) {                                  \
        DELETE_CALL;                                            \
      } else {                                                  \
        g_held[i] = p;                                          \
      }                                                         \
    }                                                           \
  }

EXPLICIT_SITE(plain, 1001, 1, ::operator new(n), ::operator delete(p))
EXPLICIT_SITE(plain_sized, 1002, 1, ::operator new(n), ::operator delete(p, n))
EXPLICIT_SITE(array, 1003, 1, ::operator new[](n), ::operator delete[](p))
EXPLICIT_SITE(array_sized, 1004, 1, ::operator new[](n), ::operator delete[](p, n))
EXPLICIT_SITE(nothrow, 1005, 1, ::operator new(n, std::nothrow), ::operator delete(p, std::nothrow))
EXPLICIT_SITE(array_nothrow, 1006, 1, ::operator new[](n, std::nothrow),
              ::operator delete[](p, std::nothrow))
EXPLICIT_SITE(aligned, 1007, 64, ::operator new(n, al), ::operator delete(p, al))
EXPLICIT_SITE(aligned_sized, 1008, 128, ::operator new(n, al), ::operator delete(p, n, al))
EXPLICIT_SITE(aligned_array, 1009, 256, ::operator new[](n, al), ::operator delete[](p, al))
EXPLICIT_SITE(aligned_array_sized, 1010, 512, ::operator new[](n, al),
              ::operator delete[](p, n, al))
EXPLICIT_SITE(aligned_nothrow, 1011, 1024, ::operator new(n, al, std::nothrow),
              ::operator delete(p, al, std::nothrow))
EXPLICIT_SITE(aligned_array_nothrow, 1012, 2048, ::operator new[](n, al, std::nothrow),
              ::operator delete[](p, al, std::nothrow))

// new/delete expressions: `delete` of a complete type calls the sized form.
SITE(expr_object) void site_expr_object(int rounds, int leak) {
  for (int i = 0; i < rounds; ++i) {
    Plain* p = new Plain;
    fill_and_check(p->bytes, sizeof(p->bytes), 1013, static_cast<uint64_t>(i));
    if (i < rounds - leak) {
      delete p;
    } else {
      g_held[i] = p;
    }
  }
}

// 3 elements with a destructor: operator new[] gets 3 * 338 bytes plus the cookie.
SITE(expr_array) void site_expr_array(int rounds, int leak) {
  for (int i = 0; i < rounds; ++i) {
    WithDtor* p = new WithDtor[3];
    fill_and_check(p, 3 * sizeof(WithDtor), 1014, static_cast<uint64_t>(i));
    if (i < rounds - leak) {
      delete[] p;
    } else {
      g_held[i] = p;
    }
  }
}

SITE(expr_overaligned) void site_expr_overaligned(int rounds, int leak) {
  for (int i = 0; i < rounds; ++i) {
    OverAligned* p = new OverAligned;
    fill_and_check(p->bytes, sizeof(p->bytes), 1015, static_cast<uint64_t>(i));
    if (i < rounds - leak) {
      delete p;
    } else {
      g_held[i] = p;
    }
  }
}

SITE_BOUNDS(plain)
SITE_BOUNDS(plain_sized)
SITE_BOUNDS(array)
SITE_BOUNDS(array_sized)
SITE_BOUNDS(nothrow)
SITE_BOUNDS(array_nothrow)
SITE_BOUNDS(aligned)
SITE_BOUNDS(aligned_sized)
SITE_BOUNDS(aligned_array)
SITE_BOUNDS(aligned_array_sized)
SITE_BOUNDS(aligned_nothrow)
SITE_BOUNDS(aligned_array_nothrow)
SITE_BOUNDS(expr_object)
SITE_BOUNDS(expr_array)
SITE_BOUNDS(expr_overaligned)

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: new_delete_forms ROUNDS LEAK\n");
    return 2;
  }
  int rounds = atoi(argv[1]), leak = atoi(argv[2]);
  if (rounds < 1 || rounds > kMaxRounds || leak < 0 || leak > rounds) {
    fprintf(stderr, "new_delete_forms: need 1 <= ROUNDS <= %d and 0 <= LEAK <= ROUNDS\n",
            kMaxRounds);
    return 2;
  }
  // The cookie of a new[] of a class with a destructor holds the element count.
  const size_t cookie = sizeof(size_t);
  const Form forms[] = {
      {"plain", 1001, 1},
      {"plain_sized", 1002, 1},
      {"array", 1003, 1},
      {"array_sized", 1004, 1},
      {"nothrow", 1005, 1},
      {"array_nothrow", 1006, 1},
      {"aligned", 1007, 64},
      {"aligned_sized", 1008, 128},
      {"aligned_array", 1009, 256},
      {"aligned_array_sized", 1010, 512},
      {"aligned_nothrow", 1011, 1024},
      {"aligned_array_nothrow", 1012, 2048},
      {"expr_object", sizeof(Plain), alignof(Plain)},
      {"expr_array", 3 * sizeof(WithDtor) + cookie, alignof(WithDtor)},
      {"expr_overaligned", sizeof(OverAligned), alignof(OverAligned)},
  };
  void (*const run[])(int, int) = {
      site_plain,
      site_plain_sized,
      site_array,
      site_array_sized,
      site_nothrow,
      site_array_nothrow,
      site_aligned,
      site_aligned_sized,
      site_aligned_array,
      site_aligned_array_sized,
      site_aligned_nothrow,
      site_aligned_array_nothrow,
      site_expr_object,
      site_expr_array,
      site_expr_overaligned,
  };
  for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); ++i) {
    run[i](rounds, leak);
    report_form(forms[i], rounds, leak);
  }
  printf("checksum %016llx\n", static_cast<unsigned long long>(g_checksum));
  const uint64_t r = static_cast<uint64_t>(rounds);
  REPORT_SITE(plain, r * forms[0].size, r);
  REPORT_SITE(plain_sized, r * forms[1].size, r);
  REPORT_SITE(array, r * forms[2].size, r);
  REPORT_SITE(array_sized, r * forms[3].size, r);
  REPORT_SITE(nothrow, r * forms[4].size, r);
  REPORT_SITE(array_nothrow, r * forms[5].size, r);
  REPORT_SITE(aligned, r * forms[6].size, r);
  REPORT_SITE(aligned_sized, r * forms[7].size, r);
  REPORT_SITE(aligned_array, r * forms[8].size, r);
  REPORT_SITE(aligned_array_sized, r * forms[9].size, r);
  REPORT_SITE(aligned_nothrow, r * forms[10].size, r);
  REPORT_SITE(aligned_array_nothrow, r * forms[11].size, r);
  REPORT_SITE(expr_object, r * forms[12].size, r);
  REPORT_SITE(expr_array, r * forms[13].size, r);
  REPORT_SITE(expr_overaligned, r * forms[14].size, r);
  return 0;
}
