/* Calls the EAM gradient exported by export_eam.py: no Python at run time.
 *
 *   python export_eam.py build && cc -O2 -Ibuild -o build/eam_demo main.c build/eam.o -lm
 *   ./build/eam_demo
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "eam.h"

int main(void) {
    static double x[EAM_ARG0_SIZE], grad[EAM_GRAD0_SIZE];
    double value = 0.0;
    for (int i = 0; i < EAM_ARG0_SIZE; i++)
        x[i] = (double)i / (EAM_ARG0_SIZE - 1);

    /* a workspace per concurrent call: 64-byte aligned, size rounded up to a multiple of 64 */
    size_t bytes = ((size_t)EAM_WORKSPACE_BYTES + 63) / 64 * 64;
    void *workspace = bytes ? aligned_alloc(EAM_WORKSPACE_ALIGN, bytes) : NULL;

    int32_t status = eam(x, &value, grad, workspace);
    if (status != 0) {
        fprintf(stderr, "eam: status %d (guard failed: see eam.h)\n", (int)status);
        return 1;
    }
    double norm = 0.0;
    for (int i = 0; i < EAM_GRAD0_SIZE; i++)
        norm += grad[i] * grad[i];
    printf("C:      value = %.17g, |grad| = %.17g\n", value, sqrt(norm));
    free(workspace);
    return 0;
}
