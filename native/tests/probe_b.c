/* probe_b: the next definition of gp_probe_value after libprobe_a. */
int gp_probe_value(void) { return 2; }
