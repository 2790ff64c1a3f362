// SPDX-License-Identifier: BSD-3-Clause
/*
 * errors.c - messages for the codes in errors.h, generated from the same table.
 */
#include "errors.h"

#include <string.h>

const char *dash_strerror(int code)
{
    if (code >= 0)
        return "success";
    switch (code) {
#define DASH_ERR_MSG_(name, value, msg) \
    case value:                         \
        return msg;
        DASH_ERRNO_MAP(DASH_ERR_MSG_)
#undef DASH_ERR_MSG_
    default:
        break;
    }
    /* strerror() is not required to be thread-safe, but glibc's returns static strings for
     * known values; we only reach it for errno values outside our table. */
    if (code > -4000)
        return strerror(-code);
    return "unknown error";
}

const char *dash_errname(int code)
{
    switch (code) {
#define DASH_ERR_NAME_(name, value, msg) \
    case value:                          \
        return "DASH_" #name;
        DASH_ERRNO_MAP(DASH_ERR_NAME_)
#undef DASH_ERR_NAME_
    default:
        return code >= 0 ? "DASH_OK" : "DASH_UNKNOWN";
    }
}
