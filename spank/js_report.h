/* joulestep SPANK plugin: srun --energy-report (js_report.c). */
#ifndef JS_REPORT_H
#define JS_REPORT_H

#include <stdint.h>

#include "js_parse.h"

/* Print the user summaries of step jobid.stepid written since since_ns (the
 * step's creation by this srun) under c->spool, waiting up to 3 s for
 * slurmstepd to write them; or say where to look. */
void js_report_print(const struct js_conf *c, uint32_t jobid, uint32_t stepid, uint64_t since_ns);

#endif
