/* gp_probe: prints what dlsym(RTLD_NEXT) inside libprobe_a found (2 is right). */
#include <stdio.h>

int gp_probe_next(void);

int main(void) {
    printf("next=%d\n", gp_probe_next());
    return 0;
}
