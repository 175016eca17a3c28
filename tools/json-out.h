/* json-out.h: what the tools and poas-bench share to print JSON by hand:
 * a string with its quotes and escapes. (The library reads and writes
 * profiles through jansson; the tools stay on poas.h and libc.) */
#ifndef POAS_TOOLS_JSON_OUT_H
#define POAS_TOOLS_JSON_OUT_H

#include <stdio.h>

/* Writes s to f as a JSON string: quoted, with '"', '\\' and control
 * characters escaped. */
void tool_json_string(FILE *f, const char *s);

#endif
