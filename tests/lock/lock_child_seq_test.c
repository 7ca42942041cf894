/* lock_child_seq_test: the fair lock orders children by the 10-digit sequence
 * suffix of "<guid>-lock-<seq>" only, and ignores names that are not lock nodes. */
#include <stdio.h>

#include "check.h"
#include "zklock_int.h"

int main(void) {
    CHECK_INT_EQ(42, zklock__child_seq("0123456789abcdef0123456789abcdef-lock-0000000042"));
    CHECK_INT_EQ(2147483647, zklock__child_seq("ffffffffffffffffffffffffffffffff-lock-2147483647"));
    CHECK_INT_EQ(-1, zklock__child_seq("0123456789abcdef0123456789abcdef-lock-000000042"));
    CHECK_INT_EQ(-1, zklock__child_seq("0123456789abcdef0123456789abcdef-lock-00000000x2"));
    CHECK_INT_EQ(-1, zklock__child_seq("_c_0123456789abcdef0123456789ab-lock-0000000001"));
    CHECK_INT_EQ(-1, zklock__child_seq("herd"));
    CHECK_INT_EQ(-1, zklock__child_seq(""));
    printf("ok\n");
    return 0;
}
