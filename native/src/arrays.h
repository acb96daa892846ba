/* arrays.h - what a CUDA array costs (arrays.c). */
#ifndef GP_ARRAYS_H
#define GP_ARRAYS_H

#include "gp_base.h"

/* The bytes a CUDA array of these extents holds at least: its elements, over every mipmap
 * level, at the format's size. A lower bound (the driver's padding and alignment are not counted,
 * and a format we do not know counts half a byte per element, the least any format takes), so
 * that the charge never refuses memory a program really has. Sparse and deferred-mapping arrays
 * hold none of their own: 0. */
GP_HIDDEN uint64_t gp_array_bytes(uint64_t width, uint64_t height, uint64_t depth, int format,
                                  unsigned channels, unsigned flags, unsigned levels);

#endif
