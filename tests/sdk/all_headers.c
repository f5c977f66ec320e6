/* SPDX-License-Identifier: Apache-2.0 */
/* Compiled by the sdk.headers.* tests as C99 and as C++17: every SDK header
 * must stand alone under -pedantic -Werror. */
#include "loom/strategy.h"
#include "loom/collective.h"
#include "loom/plugin.h"

#include <string.h>

int main(void) {
  loom_host_v1 host;
  loom_collective_v1 vt;
  memset(&host, 0, sizeof host);
  memset(&vt, 0, sizeof vt);
  return (host.struct_size == 0 && vt.info == NULL && loom_dtype_size(LOOM_DTYPE_BF16) == 2) ? 0 : 1;
}
