/* number.h: how a number is written wherever POAS reads one from text, in
 * settings (POAS_DEVICES, POAS_LOG) and in the tools' options alike, so
 * that the two never take different things: decimal digits, with an
 * optional minus, a point and an exponent. strtod alone would also take
 * leading spaces, a '+', hexadecimal ("0x2"), "inf" and "nan", none of
 * which a user means there. Header-only and free of the library, like
 * path.h, so that the tools share it. */
#ifndef POAS_CORE_NUMBER_H
#define POAS_CORE_NUMBER_H

#include <ctype.h>

/* Whether s starts as such a number: an optional '-', then a digit, or a
 * point and a digit, and not "0x". What follows is the caller's to read
 * (strtod, then its own checks of the rest). */
static inline int poas__decimal_start(const char *s) {
  if (*s == '-')
    s++;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    return 0;
  return isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]));
}

#endif /* POAS_CORE_NUMBER_H */
