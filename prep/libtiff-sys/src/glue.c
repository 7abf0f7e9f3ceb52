/* Glue between glm5v's TIFF decoder (glm5v-prep, src/decode/tiff.rs) and libtiff: a TIFF read
 * from memory, libtiff's errors kept for the caller instead of printed, typed tag getters, and
 * the TIFFRGBAImage read that Pillow's TiffDecode.c uses for YCbCr data. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "tiffio.h"

typedef struct {
    const unsigned char *data;
    uint64_t size;
    uint64_t pos;
    /* The first error libtiff reported (NUL-terminated; empty when none). */
    char error[400];
} glm5v_tiff_src;

static tmsize_t src_read(thandle_t h, void *buf, tmsize_t n) {
    glm5v_tiff_src *s = (glm5v_tiff_src *)h;
    if (n < 0 || s->pos >= s->size) {
        return 0;
    }
    uint64_t left = s->size - s->pos;
    uint64_t k = (uint64_t)n < left ? (uint64_t)n : left;
    memcpy(buf, s->data + s->pos, (size_t)k);
    s->pos += k;
    return (tmsize_t)k;
}

static tmsize_t src_write(thandle_t h, void *buf, tmsize_t n) {
    (void)h;
    (void)buf;
    (void)n;
    return 0;
}

static toff_t src_seek(thandle_t h, toff_t off, int whence) {
    glm5v_tiff_src *s = (glm5v_tiff_src *)h;
    uint64_t base = whence == SEEK_CUR ? s->pos : whence == SEEK_END ? s->size : 0;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) {
        return (toff_t)-1;
    }
    s->pos = base + off;
    return s->pos;
}

static int src_close(thandle_t h) {
    (void)h;
    return 0;
}

static toff_t src_size(thandle_t h) { return ((glm5v_tiff_src *)h)->size; }

/* The whole file is in memory: libtiff reads strips from it directly, as from Pillow's
 * _tiffMapProc. */
static int src_map(thandle_t h, void **base, toff_t *size) {
    glm5v_tiff_src *s = (glm5v_tiff_src *)h;
    *base = (void *)s->data;
    *size = s->size;
    return 1;
}

static void src_unmap(thandle_t h, void *base, toff_t size) {
    (void)h;
    (void)base;
    (void)size;
}

static int on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap) {
    (void)tif;
    glm5v_tiff_src *s = (glm5v_tiff_src *)user;
    if (s && s->error[0] == 0) {
        int k = snprintf(s->error, sizeof s->error, "%s: ", module ? module : "libtiff");
        if (k < 0 || (size_t)k >= sizeof s->error) {
            k = 0;
        }
        vsnprintf(s->error + k, sizeof s->error - (size_t)k, fmt, ap);
    }
    return 1;
}

static int on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap) {
    (void)tif;
    (void)user;
    (void)module;
    (void)fmt;
    (void)ap;
    return 1;
}

/* Opens `s` read-only ("rC": strip chopping on, as Pillow opens it), with libtiff's allocations
 * bounded by `max_alloc` bytes each and in total. NULL on failure (the reason in s->error). */
TIFF *glm5v_tiff_open(glm5v_tiff_src *s, int64_t max_alloc) {
    TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
    if (!o) {
        return NULL;
    }
    TIFFOpenOptionsSetErrorHandlerExtR(o, on_error, s);
    TIFFOpenOptionsSetWarningHandlerExtR(o, on_warning, s);
    TIFFOpenOptionsSetMaxSingleMemAlloc(o, max_alloc);
    TIFFOpenOptionsSetMaxCumulatedMemAlloc(o, max_alloc);
    TIFF *t = TIFFClientOpenExt("image.tif", "rC", (thandle_t)s, src_read, src_write, src_seek,
                                src_close, src_size, src_map, src_unmap, o);
    TIFFOpenOptionsFree(o);
    return t;
}

int glm5v_tiff_get_u16(TIFF *t, uint32_t tag, int defaulted, uint16_t *v) {
    return defaulted ? TIFFGetFieldDefaulted(t, tag, v) : TIFFGetField(t, tag, v);
}

int glm5v_tiff_get_u32(TIFF *t, uint32_t tag, int defaulted, uint32_t *v) {
    return defaulted ? TIFFGetFieldDefaulted(t, tag, v) : TIFFGetField(t, tag, v);
}

int glm5v_tiff_get_u16_pair(TIFF *t, uint32_t tag, int defaulted, uint16_t *a, uint16_t *b) {
    return defaulted ? TIFFGetFieldDefaulted(t, tag, a, b) : TIFFGetField(t, tag, a, b);
}

int glm5v_tiff_extrasamples(TIFF *t, int defaulted, uint16_t *count, const uint16_t **values) {
    uint16_t *v = NULL;
    int ok = defaulted ? TIFFGetFieldDefaulted(t, TIFFTAG_EXTRASAMPLES, count, &v)
                       : TIFFGetField(t, TIFFTAG_EXTRASAMPLES, count, &v);
    *values = v;
    return ok;
}

int glm5v_tiff_colormap(TIFF *t, const uint16_t **r, const uint16_t **g, const uint16_t **b) {
    uint16_t *rr = NULL, *gg = NULL, *bb = NULL;
    int ok = TIFFGetField(t, TIFFTAG_COLORMAP, &rr, &gg, &bb);
    *r = rr;
    *g = gg;
    *b = bb;
    return ok;
}

int glm5v_tiff_set_jpeg_rgb(TIFF *t) {
    return TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
}

/* Pillow's _decodeAsRGBA: TIFFRGBAImage over the image, read `rows_per_block` rows at a time
 * into a block buffer, each block's first `width` pixels of each row copied to `out` (`width` x
 * `height` ABGR words). 0 on failure. */
int glm5v_tiff_read_rgba(TIFF *t, uint32_t width, uint32_t height, uint32_t rows_per_block,
                         uint32_t *out) {
    TIFFRGBAImage img;
    char emsg[1024] = "";
    if (!(TIFFRGBAImageOK(t, emsg) && TIFFRGBAImageBegin(&img, t, 0, emsg))) {
        if (emsg[0]) {
            TIFFErrorExtR(t, "TIFFRGBAImage", "%s", emsg);
        }
        return 0;
    }
    img.orientation = ORIENTATION_TOPLEFT;
    img.req_orientation = ORIENTATION_TOPLEFT;
    img.col_offset = 0;
    int ok = 1;
    if (img.width < width || img.height < height || rows_per_block == 0) {
        TIFFErrorExtR(t, "TIFFRGBAImage", "the RGBA image is %ux%u, smaller than the image",
                      img.width, img.height);
        ok = 0;
    }
    uint32_t *block = NULL;
    if (ok) {
        block = (uint32_t *)calloc((size_t)rows_per_block * img.width, 4);
        ok = block != NULL;
    }
    for (uint32_t y = 0; ok && y < height; y += rows_per_block) {
        img.row_offset = (int)y;
        uint32_t rows = rows_per_block < img.height - y ? rows_per_block : img.height - y;
        if (!TIFFRGBAImageGet(&img, block, img.width, rows)) {
            ok = 0;
            break;
        }
        uint32_t keep = rows_per_block < height - y ? rows_per_block : height - y;
        for (uint32_t r = 0; r < keep; r++) {
            memcpy(out + (size_t)(y + r) * width, block + (size_t)r * img.width,
                   (size_t)width * 4);
        }
    }
    free(block);
    TIFFRGBAImageEnd(&img);
    return ok;
}
