/* joulestep SPANK plugin: directories root may write into, atomic writes
 * and directory loops. One rule for the plugin and the library
 * (accounting/src/fsutil.c; docs/design.md, "Directories root writes
 * into"): used by the record, the pending fallback, the job cache, the
 * phase socket and the clock journals' state directory. */
#ifndef JS_FS_H
#define JS_FS_H

#include "../accounting/src/fsutil.h"

#endif
