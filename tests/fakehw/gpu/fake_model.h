/* The fakehw GPU model, shared by the vendor-library stand-ins
 * (fake_nvml.c, fake_amdsmi.c): tests/fakehw/fakegpu.py writes the tree,
 * these read it. See fake_nvml.c for the model. Test code only. */
#ifndef FAKE_MODEL_H
#define FAKE_MODEL_H
#include <stddef.h>

#define MAXG 16
const char *fm_root(void);
int fm_path(char *buf, size_t len, int g, const char *f);
int fm_str(int g, const char *f, char *out, size_t len);
double fm_num(int g, const char *f, double dflt);
double fm_now_ns(void);
/* GPU directories gpu0.. of this vendor ("nvidia", "amd") under the root: their
 * numbers in order, as the library's indices. */
int fm_list(const char *vendor, int *out);
double fm_counter_mj(int g);          /* the energy counter now                */
double fm_power_mw(int g);            /* power now                             */
double fm_sm_mhz(int g);              /* graphics clock now                    */
int fm_append_lock(int g, unsigned lo, unsigned hi); /* 0, or -1             */
#endif
