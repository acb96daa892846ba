/* probe_a: defines gp_probe_value (returns 1) and asks dlsym(RTLD_NEXT) for the next definition,
 * which is libprobe_b's (returns 2). Through an interposed dlsym that loses track of its caller,
 * the "next" lookup would start after libgpupool and find probe_a's own definition again. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

int gp_probe_value(void) { return 1; }

int gp_probe_next(void) {
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gp_probe_value");
    return next != NULL ? next() : -1;
}
