// The hottest entry points, malloc, operator new and the unsized and sized frees, written
// out so each is the shortest sequence that does its job: a check, then a conditional tail
// jump straight into jemalloc (a call, for nothrow new). No frame, no saved register (but
// nothrow new's size); everything else happens out of line in C++
// (preload/hooks.cc). Compilers emit two to three times as many instructions for the same
// logic (a TLS load, subtract, store and test; the range check as subtract and compare).
//
// malloc: subtract the size from this thread's byte counter (d9_tls_state, the first word
// of alloc/thread_state.h's ThreadState). While the counter stays above zero no sample point
// was reached and jemalloc serves the request. Otherwise d9_malloc_sampled decides: set up
// the thread, or take a sample. jemalloc's smallest size class is already 16 bytes
// (alloc/size_classes.h), so no rounding is needed here.
//
// free and delete: a pointer outside the sampled arena's reservation [d9_sampled_lo,
// d9_sampled_hi) (alloc/sampled_heap.h) cannot be a tracked sample and goes straight to
// jemalloc; NULL is below the range. The reservation is placed below the usual heap
// (alloc/sampled_heap.cc), so the high bound is compared first.

        .text

// The allocation's charge: subtracts the size in rdi from this thread's byte counter and
// leaves the flags of the result, greater than zero while no sample point was reached.
.macro charge
        movq    d9_tls_state@gottpoff(%rip), %rax
        subq    %rdi, %fs:(%rax)
.endm

// nothrow operator new: the charge, then a call (not a jump) into jemalloc, since an empty
// result must still reach the new-handler loop with the size (jemalloc's own nothrow new
// would reach d9_new_slow, which throws). The size is kept on the stack, which also aligns
// it for the call. `sampled` and `failed` take over with the size in rdi and this frame
// already gone, so exceptions never pass through it.
.macro nothrow_new_body sampled, failed
        charge
        jle     \sampled
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        call    d9_je_malloc
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        jz      \failed
        ret
.endm

// The frees' range check: a pointer at or above the high bound, or below the low one,
// goes straight to `jemalloc`; one inside the reservation to `sampled`.
.macro range_check jemalloc, sampled
        cmpq    d9_sampled_hi(%rip), %rdi
        jae     \jemalloc
        cmpq    d9_sampled_lo(%rip), %rdi
        jb      \jemalloc
        jmp     \sampled
.endm

        .p2align 4
        .globl  malloc
        .type   malloc, @function
malloc:
        .cfi_startproc
        charge
        jg      d9_je_malloc
        jmp     d9_malloc_sampled
        .cfi_endproc
        .size   malloc, .-malloc

// operator new(size) and new[](size): malloc's charge, then jemalloc's own operator new,
// whose rare slow path comes back to d9 for the new-handler loop (d9_new_slow, see
// alloc/prefix_jemalloc.cmake), so the common case is a jump like malloc's.
        .p2align 4
        .globl  _Znwm
        .type   _Znwm, @function
        .globl  _Znam
        .type   _Znam, @function
_Znwm:
_Znam:
        .cfi_startproc
        charge
        jg      d9_je__Znwm
        jmp     d9_new_sampled
        .cfi_endproc
        .size   _Znwm, .-_Znwm
        .size   _Znam, .-_Znam

// operator new(size, nothrow) and new[](size, nothrow).
        .p2align 4
        .globl  _ZnwmRKSt9nothrow_t
        .type   _ZnwmRKSt9nothrow_t, @function
        .globl  _ZnamRKSt9nothrow_t
        .type   _ZnamRKSt9nothrow_t, @function
_ZnwmRKSt9nothrow_t:
_ZnamRKSt9nothrow_t:
        .cfi_startproc
        nothrow_new_body d9_new_nothrow_sampled, d9_new_nothrow_failed
        .cfi_endproc
        .size   _ZnwmRKSt9nothrow_t, .-_ZnwmRKSt9nothrow_t
        .size   _ZnamRKSt9nothrow_t, .-_ZnamRKSt9nothrow_t

// free(p), operator delete(p), delete[](p) and their nothrow forms: all one function.
        .p2align 4
        .globl  free
        .type   free, @function
        .globl  _ZdlPv
        .type   _ZdlPv, @function
        .globl  _ZdaPv
        .type   _ZdaPv, @function
        .globl  _ZdlPvRKSt9nothrow_t
        .type   _ZdlPvRKSt9nothrow_t, @function
        .globl  _ZdaPvRKSt9nothrow_t
        .type   _ZdaPvRKSt9nothrow_t, @function
free:
_ZdlPv:
_ZdaPv:
_ZdlPvRKSt9nothrow_t:
_ZdaPvRKSt9nothrow_t:
        .cfi_startproc
        range_check d9_je_free, d9_free_sampled
        .cfi_endproc
        .size   free, .-free
        .size   _ZdlPv, .-_ZdlPv
        .size   _ZdaPv, .-_ZdaPv
        .size   _ZdlPvRKSt9nothrow_t, .-_ZdlPvRKSt9nothrow_t
        .size   _ZdaPvRKSt9nothrow_t, .-_ZdaPvRKSt9nothrow_t

// operator delete(p, size) and delete[](p, size): jemalloc's own sized delete (which
// ignores NULL) skips the size lookup of an unsized free.
        .p2align 4
        .globl  _ZdlPvm
        .type   _ZdlPvm, @function
        .globl  _ZdaPvm
        .type   _ZdaPvm, @function
_ZdlPvm:
_ZdaPvm:
        .cfi_startproc
        range_check d9_je__ZdlPvm, d9_sized_free_sampled
        .cfi_endproc
        .size   _ZdlPvm, .-_ZdlPvm
        .size   _ZdaPvm, .-_ZdaPvm

        .hidden d9_sampled_lo
        .hidden d9_sampled_hi
        .hidden d9_malloc_sampled
        .hidden d9_free_sampled
        .hidden d9_sized_free_sampled
        .hidden d9_new_sampled
        .hidden d9_new_nothrow_sampled
        .hidden d9_new_nothrow_failed

        .section .note.GNU-stack, "", @progbits
