/* A small, stable C ABI over FFmpeg's libraries for glm5v's video files (prep/src/video/ffmpeg.rs).
 *
 * It makes the calls torchcodec 0.17.0 makes on the CPU for
 * `VideoDecoder(path, seek_mode="exact", num_ffmpeg_threads=0).get_frames_at(indices)`, the
 * default video path of transformers 5.23.0 (facts from torchcodec's src/torchcodec/_core:
 * SingleStreamDecoder.cpp, Metadata.cpp, CpuDeviceInterface.cpp, SwScale.cpp, FilterGraph.cpp,
 * FFMPEGCommon.cpp), so that the same FFmpeg gives the same RGB24 pixels:
 *   - open: avformat_open_input + avformat_find_stream_info; the best video stream with its
 *     default decoder (av_find_best_stream); an "exact" scan of every packet (pts, else dts;
 *     AV_PKT_FLAG_DISCARD skipped) giving the frame count, begin/end seconds and the key frames;
 *     the rotation of the stream's display matrix, rounded to a multiple of 90 degrees;
 *   - decode: a codec context from the stream's parameters (thread_count 1, not 0: see
 *     open_decoder), pkt_timebase; frames
 *     fetched by index in pts order (the first decoded frame whose pts is at or after the
 *     target's, seeking to the target's key frame as torchcodec does);
 *   - colour: without rotation, swscale when the frame width is a multiple of 32 (flags 0, the
 *     frame's colour matrix from sws_getCoefficients and its range when specified), else a
 *     filter graph "copy" between a buffer source and an rgb24 buffersink; with rotation, a
 *     filter graph "format=rgb24,transpose=cclock|transpose=clock|hflip,vflip".
 * Every function returns 0 or a negative G5V_E_* code with a message in `err`. */

#include <libavcodec/avcodec.h>
#include <libavfilter/avfilter.h>
#include <libavfilter/buffersink.h>
#include <libavfilter/buffersrc.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define G5V_E_OPEN -1       /* not a media file FFmpeg can open */
#define G5V_E_NO_VIDEO -2   /* no video stream */
#define G5V_E_NO_DECODER -3 /* a video stream FFmpeg has no decoder for */
#define G5V_E_CORRUPT -4    /* read or decode error, truncated file */
#define G5V_E_INTERNAL -5   /* allocation, filter graph, bad argument */
#define G5V_E_ROTATION -6   /* a display matrix that is not a multiple of 90 degrees */

typedef struct {
    int64_t num_frames;          /* frames found by the scan */
    double begin_seconds;        /* first pts (content) */
    double end_seconds;          /* max(pts + duration) (content) */
    double fps_header;           /* r_frame_rate, 0 when unknown */
    int32_t width, height;       /* after rotation */
    int32_t coded_width, coded_height;
    int32_t rotation;            /* 0, 90 (counter-clockwise), -90, 180 */
    int32_t bits_per_component;  /* of the stream's pixel format, 0 when unknown */
    char codec[64];
    char pix_fmt[32];
    char container[32];
} g5v_info;

typedef struct {
    int64_t pts;
    int key;
} frame_info;

typedef struct {
    AVFormatContext *fmt;
    const AVCodec *codec;
    AVCodecContext *dec;
    int stream;
    AVRational time_base;
    int rotation;
    frame_info *frames; /* sorted by pts */
    int64_t nframes;
    frame_info *keys; /* sorted by pts */
    int64_t nkeys;
    /* decode state */
    AVFrame *frame;
    AVPacket *pkt;
    int eof_sent;
    int64_t last_index;    /* index of the last frame returned, -1 before */
    int64_t last_pts;      /* pts of the last frame decoded, INT64_MIN before */
    int64_t cursor;        /* target pts */
    /* colour conversion */
    struct SwsContext *sws;
    int sws_w, sws_h, sws_fmt, sws_spc, sws_range;
    AVFilterGraph *graph;
    AVFilterContext *src, *sink;
    int g_w, g_h, g_fmt;
} g5v_video;

static void set_err(char *err, size_t len, const char *what, int code) {
    if (!err || !len) return;
    if (code < 0 && code != G5V_E_INTERNAL) {
        char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
        av_strerror(code, buf, sizeof buf);
        snprintf(err, len, "%s: %s", what, buf);
    } else {
        snprintf(err, len, "%s", what);
    }
}

static int cmp_pts(const void *a, const void *b) {
    int64_t x = ((const frame_info *)a)->pts, y = ((const frame_info *)b)->pts;
    return x < y ? -1 : x > y;
}

static int push(frame_info **v, int64_t *n, int64_t *cap, frame_info f) {
    if (*n == *cap) {
        int64_t c = *cap ? *cap * 2 : 256;
        frame_info *p = av_realloc_array(*v, (size_t)c, sizeof **v);
        if (!p) return -1;
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = f;
    return 0;
}

void g5v_close(g5v_video *v) {
    if (!v) return;
    sws_freeContext(v->sws);
    avfilter_graph_free(&v->graph);
    av_frame_free(&v->frame);
    av_packet_free(&v->pkt);
    avcodec_free_context(&v->dec);
    avformat_close_input(&v->fmt);
    av_free(v->frames);
    av_free(v->keys);
    av_free(v);
}

/* torchcodec's pts_to_seconds: the product before the division (not av_q2d) */
static double secs(int64_t pts, AVRational tb) { return (double)pts * tb.num / tb.den; }

static int64_t pkt_pts(const AVPacket *p) { return p->pts == AV_NOPTS_VALUE ? p->dts : p->pts; }
static int64_t frm_pts(const AVFrame *f) { return f->pts == AV_NOPTS_VALUE ? f->pkt_dts : f->pts; }

int g5v_open(const char *path, g5v_video **out, g5v_info *info, char *err, size_t errlen) {
    *out = NULL;
    memset(info, 0, sizeof *info);
    av_log_set_level(AV_LOG_QUIET);
    g5v_video *v = av_mallocz(sizeof *v);
    if (!v) return set_err(err, errlen, "out of memory", G5V_E_INTERNAL), G5V_E_INTERNAL;
    /* a local file only: the `file:` protocol named, and no other protocol allowed (a path such
     * as "concat:a|b" or a playlist naming a URL is not followed); demuxing is FFmpeg's default */
    size_t plen = strlen(path);
    char *url = av_malloc(plen + 6);
    AVDictionary *opts = NULL;
    if (!url) {
        g5v_close(v);
        return set_err(err, errlen, "out of memory", G5V_E_INTERNAL), G5V_E_INTERNAL;
    }
    memcpy(url, "file:", 5);
    memcpy(url + 5, path, plen + 1);
    av_dict_set(&opts, "protocol_whitelist", "file", 0);
    int rc = avformat_open_input(&v->fmt, url, NULL, &opts);
    av_dict_free(&opts);
    av_free(url);
    if (rc < 0) {
        set_err(err, errlen, "not a video container FFmpeg can open", rc);
        g5v_close(v);
        return G5V_E_OPEN;
    }
    rc = avformat_find_stream_info(v->fmt, NULL);
    if (rc < 0) {
        set_err(err, errlen, "cannot read the stream information", rc);
        g5v_close(v);
        return G5V_E_CORRUPT;
    }
    snprintf(info->container, sizeof info->container, "%s", v->fmt->iformat->name);
    const AVCodec *codec = NULL;
    int s = av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (s == AVERROR_STREAM_NOT_FOUND || s < 0) {
        int any_video = 0;
        for (unsigned i = 0; i < v->fmt->nb_streams; i++)
            if (v->fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO) {
                char tag[AV_FOURCC_MAX_STRING_SIZE] = {0};
                any_video = 1;
                av_fourcc_make_string(tag, v->fmt->streams[i]->codecpar->codec_tag);
                snprintf(info->codec, sizeof info->codec, "%.16s, tag %s",
                         avcodec_get_name(v->fmt->streams[i]->codecpar->codec_id), tag);
            }
        if (s == AVERROR_DECODER_NOT_FOUND || any_video) {
            set_err(err, errlen, "FFmpeg has no decoder for the video stream's codec", G5V_E_INTERNAL);
            g5v_close(v);
            return G5V_E_NO_DECODER;
        }
        set_err(err, errlen, "the file has no video stream", G5V_E_INTERNAL);
        g5v_close(v);
        return G5V_E_NO_VIDEO;
    }
    if (!codec) {
        set_err(err, errlen, "FFmpeg has no decoder for the video stream's codec", G5V_E_INTERNAL);
        g5v_close(v);
        return G5V_E_NO_DECODER;
    }
    v->stream = s;
    v->codec = codec;
    AVStream *st = v->fmt->streams[s];
    v->time_base = st->time_base;
    snprintf(info->codec, sizeof info->codec, "%s", avcodec_get_name(st->codecpar->codec_id));
    const char *pf = av_get_pix_fmt_name((enum AVPixelFormat)st->codecpar->format);
    snprintf(info->pix_fmt, sizeof info->pix_fmt, "%s", pf ? pf : "");
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get((enum AVPixelFormat)st->codecpar->format);
    info->bits_per_component = desc ? desc->comp[0].depth : 0;
    double fps = av_q2d(st->r_frame_rate);
    info->fps_header = fps > 0 ? fps : 0;

    /* rotation: torchcodec's get_rotation_from_stream, rounded as rotation_from_degrees */
    const uint8_t *dm = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, NULL);
    int rot = 0;
    if (dm) {
        double deg = av_display_rotation_get((const int32_t *)dm);
        if (!isnan(deg)) {
            int r = (int)lround(deg / 90.0) * 90;
            if (r == 0) rot = 0;
            else if (r == 90 || r == -90) rot = r;
            else if (r == 180 || r == -180) rot = 180;
            else {
                set_err(err, errlen, "the stream's display matrix is not a rotation in [-180, 180]",
                        G5V_E_INTERNAL);
                g5v_close(v);
                return G5V_E_ROTATION;
            }
        }
    }
    v->rotation = rot;
    info->rotation = rot;
    info->coded_width = st->codecpar->width;
    info->coded_height = st->codecpar->height;
    info->width = (rot == 90 || rot == -90) ? st->codecpar->height : st->codecpar->width;
    info->height = (rot == 90 || rot == -90) ? st->codecpar->width : st->codecpar->height;

    /* the exact-mode scan */
    v->pkt = av_packet_alloc();
    v->frame = av_frame_alloc();
    if (!v->pkt || !v->frame) {
        set_err(err, errlen, "out of memory", G5V_E_INTERNAL);
        g5v_close(v);
        return G5V_E_INTERNAL;
    }
    int64_t cap = 0, kcap = 0, begin = INT64_MAX, end = INT64_MIN;
    int corrupt = 0;
    int64_t all_packets = 0; /* of the stream, with the ones an edit list discards */
    double end_all = -INFINITY; /* the end of the last packet of any stream, in seconds */
    for (;;) {
        rc = av_read_frame(v->fmt, v->pkt);
        if (rc == AVERROR_EOF) break;
        if (rc < 0) {
            set_err(err, errlen, "cannot read a packet (truncated or corrupt file)", rc);
            g5v_close(v);
            return G5V_E_CORRUPT;
        }
        if (v->pkt->stream_index == s && (v->pkt->flags & AV_PKT_FLAG_CORRUPT)) corrupt = 1;
        if (v->pkt->stream_index == s) all_packets++;
        if (v->pkt->stream_index >= 0 && (unsigned)v->pkt->stream_index < v->fmt->nb_streams) {
            double e = secs(pkt_pts(v->pkt) + v->pkt->duration, v->fmt->streams[v->pkt->stream_index]->time_base);
            if (pkt_pts(v->pkt) != AV_NOPTS_VALUE && e > end_all) end_all = e;
        }
        if (v->pkt->stream_index == s && !(v->pkt->flags & AV_PKT_FLAG_DISCARD)) {
            int64_t p = pkt_pts(v->pkt);
            if (p < begin) begin = p;
            if (p + v->pkt->duration > end) end = p + v->pkt->duration;
            frame_info f = {p, (v->pkt->flags & AV_PKT_FLAG_KEY) != 0};
            if (push(&v->frames, &v->nframes, &cap, f) || (f.key && push(&v->keys, &v->nkeys, &kcap, f))) {
                av_packet_unref(v->pkt);
                set_err(err, errlen, "out of memory", G5V_E_INTERNAL);
                g5v_close(v);
                return G5V_E_INTERNAL;
            }
        }
        av_packet_unref(v->pkt);
    }
    /* glm5v's check (torchcodec decodes what is left): a cut packet, or fewer packets than the
     * header promises, is a truncated file */
    /* a container whose header gives its duration: the packets must reach its end (within two
     * frame intervals, or 0.1 s) */
    double header_end = 0, tolerance = fps > 0 ? 2.0 / fps : 0.1;
    if (tolerance < 0.1) tolerance = 0.1;
    int short_of_header = 0;
    if (v->fmt->duration > 0 && v->fmt->duration_estimation_method == AVFMT_DURATION_FROM_STREAM) {
        int64_t start = v->fmt->start_time == AV_NOPTS_VALUE ? 0 : v->fmt->start_time;
        header_end = (double)(start + v->fmt->duration) / AV_TIME_BASE;
        short_of_header = end_all < header_end - tolerance;
    }
    if (corrupt || (st->nb_frames > 0 && all_packets < st->nb_frames) || short_of_header) {
        char what[200];
        if (short_of_header && !corrupt && !(st->nb_frames > 0 && all_packets < st->nb_frames))
            snprintf(what, sizeof what, "truncated: the header's duration ends at %.3f s, the packets at %.3f s",
                     header_end, end_all);
        else if (corrupt)
            snprintf(what, sizeof what, "truncated: a packet is cut short (%lld complete packets read)",
                     (long long)v->nframes);
        else
            snprintf(what, sizeof what, "truncated: the header promises %lld frames, %lld found",
                     (long long)st->nb_frames, (long long)all_packets);
        set_err(err, errlen, what, G5V_E_INTERNAL);
        g5v_close(v);
        return G5V_E_CORRUPT;
    }
    if (v->nframes == 0) begin = end = 0;
    if (v->nframes > 1) qsort(v->frames, (size_t)v->nframes, sizeof *v->frames, cmp_pts);
    if (v->nkeys > 1) qsort(v->keys, (size_t)v->nkeys, sizeof *v->keys, cmp_pts);
    info->num_frames = v->nframes;
    info->begin_seconds = secs(begin, v->time_base);
    info->end_seconds = secs(end, v->time_base);
    rc = avformat_seek_file(v->fmt, 0, INT64_MIN, 0, 0, 0);
    if (rc < 0) {
        set_err(err, errlen, "cannot seek back to the start", rc);
        g5v_close(v);
        return G5V_E_CORRUPT;
    }
    for (unsigned i = 0; i < v->fmt->nb_streams; i++)
        if ((int)i != s) v->fmt->streams[i]->discard = AVDISCARD_ALL;
    v->last_index = -1;
    v->last_pts = INT64_MIN;
    v->cursor = INT64_MIN;
    *out = v;
    return 0;
}

static int open_decoder(g5v_video *v, char *err, size_t errlen) {
    AVStream *st = v->fmt->streams[v->stream];
    v->dec = avcodec_alloc_context3(v->codec);
    if (!v->dec) return set_err(err, errlen, "out of memory", G5V_E_INTERNAL), G5V_E_INTERNAL;
    int rc = avcodec_parameters_to_context(v->dec, st->codecpar);
    if (rc < 0) return set_err(err, errlen, "bad codec parameters", rc), G5V_E_CORRUPT;
    /* One thread, where torchcodec (num_ffmpeg_threads=0) lets FFmpeg pick: the same pixels on
     * every valid stream (FFmpeg's decoders are bit-exact across thread counts), and on a damaged
     * one frame threading's error concealment differs from run to run (fuzz finding F7, 120
     * passes stable with one thread); the price is a single-core decode. */
    v->dec->thread_count = 1;
    v->dec->pkt_timebase = st->time_base;
    rc = avcodec_open2(v->dec, v->codec, NULL);
    if (rc < 0) return set_err(err, errlen, "cannot open the decoder", rc), G5V_E_NO_DECODER;
    v->dec->time_base = st->time_base;
    return 0;
}

/* index of the last key frame at or before pts, -1 if none (upper_bound - 1) */
static int64_t key_for(const g5v_video *v, int64_t pts) {
    int64_t lo = 0, hi = v->nkeys;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pts < v->keys[mid].pts) hi = mid;
        else lo = mid + 1;
    }
    return lo - 1;
}

/* frame index of the first frame whose next pts is after `pts` (lower bound) */
static int64_t index_lower_bound(const g5v_video *v, int64_t pts) {
    int64_t lo = 0, hi = v->nframes;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int64_t next = mid + 1 < v->nframes ? v->frames[mid + 1].pts : INT64_MAX;
        if (secs(next, v->time_base) <= secs(pts, v->time_base)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int64_t frame_index_of_pts(const g5v_video *v, int64_t pts) {
    int64_t lo = 0, hi = v->nframes;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (v->frames[mid].pts < pts) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* torchcodec's can_we_avoid_seeking for a cursor just set */
static int can_avoid_seek(const g5v_video *v) {
    if (v->cursor < v->last_pts) return 0;
    if (v->cursor == v->last_pts) return 0;
    int64_t a = key_for(v, v->last_pts), b = key_for(v, v->cursor);
    if (a < 0 || b < 0) return 0;
    if (a == b) return 1;
    int64_t last_idx = index_lower_bound(v, v->last_pts);
    int64_t key_idx = frame_index_of_pts(v, v->keys[b].pts);
    int64_t reorder = v->dec->has_b_frames > 0 ? v->dec->has_b_frames : 0;
    int64_t in_flight = 0;
    if (v->dec->active_thread_type & FF_THREAD_FRAME)
        in_flight = (v->dec->thread_count > 1 ? v->dec->thread_count : 1) - 1;
    return key_idx - last_idx <= reorder + in_flight;
}

static int seek_to_cursor(g5v_video *v, char *err, size_t errlen) {
    int64_t desired = v->cursor;
    if (v->nkeys) {
        int64_t k = key_for(v, desired);
        if (k >= 0) desired = v->keys[k].pts;
    }
    int rc = avformat_seek_file(v->fmt, v->stream, INT64_MIN, desired, desired, 0);
    if (rc < 0) return set_err(err, errlen, "cannot seek", rc), G5V_E_CORRUPT;
    avcodec_flush_buffers(v->dec);
    v->eof_sent = 0;
    return 0;
}

/* the next decoded frame with pts >= cursor, into v->frame */
static int decode_next(g5v_video *v, int cursor_set, char *err, size_t errlen) {
    if (cursor_set && !can_avoid_seek(v)) {
        int rc = seek_to_cursor(v, err, errlen);
        if (rc) return rc;
    }
    for (;;) {
        int rc = avcodec_receive_frame(v->dec, v->frame);
        if (rc == 0) {
            v->last_pts = frm_pts(v->frame);
            if (frm_pts(v->frame) >= v->cursor) return 0;
            av_frame_unref(v->frame);
            continue;
        }
        if (rc == AVERROR_EOF)
            return set_err(err, errlen, "the stream ended before the frame (truncated file)", G5V_E_INTERNAL),
                   G5V_E_CORRUPT;
        if (rc != AVERROR(EAGAIN)) return set_err(err, errlen, "cannot decode a frame", rc), G5V_E_CORRUPT;
        if (v->eof_sent) continue;
        for (;;) {
            rc = av_read_frame(v->fmt, v->pkt);
            if (rc == AVERROR_EOF) {
                rc = avcodec_send_packet(v->dec, NULL);
                if (rc < 0 && rc != AVERROR_EOF) return set_err(err, errlen, "cannot flush the decoder", rc), G5V_E_CORRUPT;
                v->eof_sent = 1;
                break;
            }
            if (rc < 0) return set_err(err, errlen, "cannot read a packet (truncated or corrupt file)", rc), G5V_E_CORRUPT;
            if (v->pkt->stream_index != v->stream) {
                av_packet_unref(v->pkt);
                continue;
            }
            rc = avcodec_send_packet(v->dec, v->pkt);
            av_packet_unref(v->pkt);
            if (rc < 0) return set_err(err, errlen, "the decoder refused a packet (corrupt data)", rc), G5V_E_CORRUPT;
            break;
        }
    }
}

static int convert_sws(g5v_video *v, const AVFrame *f, uint8_t *out, char *err, size_t errlen) {
    if (!v->sws || v->sws_w != f->width || v->sws_h != f->height || v->sws_fmt != f->format ||
        v->sws_spc != (int)f->colorspace || v->sws_range != (int)f->color_range) {
        sws_freeContext(v->sws);
        v->sws = sws_getContext(f->width, f->height, f->format, f->width, f->height, AV_PIX_FMT_RGB24, 0,
                                NULL, NULL, NULL);
        if (!v->sws) return set_err(err, errlen, "sws_getContext failed", G5V_E_INTERNAL), G5V_E_INTERNAL;
        int *inv_table, *table, src_range, dst_range, brightness, contrast, saturation;
        if (sws_getColorspaceDetails(v->sws, &inv_table, &src_range, &table, &dst_range, &brightness, &contrast,
                                     &saturation) == -1)
            return set_err(err, errlen, "sws_getColorspaceDetails failed", G5V_E_INTERNAL), G5V_E_INTERNAL;
        if (f->color_range != AVCOL_RANGE_UNSPECIFIED) src_range = f->color_range == AVCOL_RANGE_JPEG;
        const int *coefs = sws_getCoefficients(f->colorspace);
        if (sws_setColorspaceDetails(v->sws, coefs, src_range, coefs, dst_range, brightness, contrast, saturation) ==
            -1)
            return set_err(err, errlen, "sws_setColorspaceDetails failed", G5V_E_INTERNAL), G5V_E_INTERNAL;
        v->sws_w = f->width;
        v->sws_h = f->height;
        v->sws_fmt = f->format;
        v->sws_spc = f->colorspace;
        v->sws_range = f->color_range;
    }
    uint8_t *dst[4] = {out, NULL, NULL, NULL};
    int lines[4] = {f->width * 3, 0, 0, 0};
    int h = sws_scale(v->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst, lines);
    if (h != f->height) return set_err(err, errlen, "sws_scale failed", G5V_E_INTERNAL), G5V_E_INTERNAL;
    return 0;
}

static int build_graph(g5v_video *v, const AVFrame *f, char *err, size_t errlen) {
    avfilter_graph_free(&v->graph);
    v->graph = avfilter_graph_alloc();
    if (!v->graph) return set_err(err, errlen, "out of memory", G5V_E_INTERNAL), G5V_E_INTERNAL;
    v->graph->nb_threads = 0;
    AVBufferSrcParameters *par = av_buffersrc_parameters_alloc();
    if (!par) return set_err(err, errlen, "out of memory", G5V_E_INTERNAL), G5V_E_INTERNAL;
    par->format = f->format;
    par->width = f->width;
    par->height = f->height;
    par->sample_aspect_ratio = f->sample_aspect_ratio;
    par->time_base = v->time_base;
    v->src = avfilter_graph_alloc_filter(v->graph, avfilter_get_by_name("buffer"), "in");
    if (!v->src) {
        av_free(par);
        return set_err(err, errlen, "cannot allocate the buffer source", G5V_E_INTERNAL), G5V_E_INTERNAL;
    }
    int rc = av_buffersrc_parameters_set(v->src, par);
    av_free(par);
    if (rc < 0) return set_err(err, errlen, "buffer source parameters", rc), G5V_E_INTERNAL;
    rc = avfilter_init_str(v->src, NULL);
    if (rc < 0) return set_err(err, errlen, "buffer source init", rc), G5V_E_INTERNAL;
    rc = avfilter_graph_create_filter(&v->sink, avfilter_get_by_name("buffersink"), "out", NULL, NULL, v->graph);
    if (rc < 0) return set_err(err, errlen, "buffer sink", rc), G5V_E_INTERNAL;
    enum AVPixelFormat fmts[] = {AV_PIX_FMT_RGB24, AV_PIX_FMT_NONE};
    rc = av_opt_set_int_list(v->sink, "pix_fmts", fmts, AV_PIX_FMT_NONE, AV_OPT_SEARCH_CHILDREN);
    if (rc < 0) return set_err(err, errlen, "buffer sink pixel format", rc), G5V_E_INTERNAL;
    const char *filters = "copy";
    if (v->rotation == 90) filters = "format=rgb24,transpose=cclock";
    else if (v->rotation == -90) filters = "format=rgb24,transpose=clock";
    else if (v->rotation == 180) filters = "format=rgb24,hflip,vflip";
    AVFilterInOut *outputs = avfilter_inout_alloc(), *inputs = avfilter_inout_alloc();
    if (!outputs || !inputs) {
        avfilter_inout_free(&outputs);
        avfilter_inout_free(&inputs);
        return set_err(err, errlen, "out of memory", G5V_E_INTERNAL), G5V_E_INTERNAL;
    }
    outputs->name = av_strdup("in");
    outputs->filter_ctx = v->src;
    outputs->pad_idx = 0;
    outputs->next = NULL;
    inputs->name = av_strdup("out");
    inputs->filter_ctx = v->sink;
    inputs->pad_idx = 0;
    inputs->next = NULL;
    rc = avfilter_graph_parse_ptr(v->graph, filters, &inputs, &outputs, NULL);
    avfilter_inout_free(&outputs);
    avfilter_inout_free(&inputs);
    if (rc < 0) return set_err(err, errlen, "filter graph parse", rc), G5V_E_INTERNAL;
    rc = avfilter_graph_config(v->graph, NULL);
    if (rc < 0) return set_err(err, errlen, "filter graph config", rc), G5V_E_INTERNAL;
    v->g_w = f->width;
    v->g_h = f->height;
    v->g_fmt = f->format;
    return 0;
}

static int convert_graph(g5v_video *v, const AVFrame *f, uint8_t *out, int ow, int oh, char *err, size_t errlen) {
    if (!v->graph || v->g_w != f->width || v->g_h != f->height || v->g_fmt != f->format) {
        int rc = build_graph(v, f, err, errlen);
        if (rc) return rc;
    }
    int rc = av_buffersrc_write_frame(v->src, f);
    if (rc < 0) return set_err(err, errlen, "filter graph input", rc), G5V_E_INTERNAL;
    AVFrame *o = av_frame_alloc();
    if (!o) return set_err(err, errlen, "out of memory", G5V_E_INTERNAL), G5V_E_INTERNAL;
    rc = av_buffersink_get_frame(v->sink, o);
    if (rc < 0) {
        av_frame_free(&o);
        return set_err(err, errlen, "filter graph output", rc), G5V_E_INTERNAL;
    }
    if (o->width != ow || o->height != oh || o->format != AV_PIX_FMT_RGB24) {
        av_frame_free(&o);
        return set_err(err, errlen, "the filter graph gave another frame size", G5V_E_INTERNAL), G5V_E_INTERNAL;
    }
    for (int y = 0; y < oh; y++) memcpy(out + (size_t)y * ow * 3, o->data[0] + (size_t)y * o->linesize[0], (size_t)ow * 3);
    av_frame_free(&o);
    return 0;
}

/* Frame `index` (in pts order) as RGB24, `out_len` = width * height * 3 of g5v_info (after
 * rotation); indices must not decrease between calls (a repeat returns the same frame again). */
int g5v_frame(g5v_video *v, int64_t index, uint8_t *out, size_t out_len, int32_t width, int32_t height, char *err,
              size_t errlen) {
    if (index < 0 || index >= v->nframes)
        return set_err(err, errlen, "frame index out of range", G5V_E_INTERNAL), G5V_E_INTERNAL;
    if ((size_t)width * (size_t)height * 3 != out_len)
        return set_err(err, errlen, "output buffer size", G5V_E_INTERNAL), G5V_E_INTERNAL;
    if (!v->dec) {
        int rc = open_decoder(v, err, errlen);
        if (rc) return rc;
    }
    int cursor_set = 0;
    if (index != v->last_index + 1) {
        v->cursor = v->frames[index].pts;
        cursor_set = 1;
    }
    int rc = decode_next(v, cursor_set, err, errlen);
    if (rc) return rc;
    v->last_index = index;
    AVFrame *f = v->frame;
    int ow = (v->rotation == 90 || v->rotation == -90) ? f->height : f->width;
    int oh = (v->rotation == 90 || v->rotation == -90) ? f->width : f->height;
    if (ow != width || oh != height) {
        av_frame_unref(f);
        return set_err(err, errlen, "a frame's size differs from the stream's (variable resolution)", G5V_E_INTERNAL),
               G5V_E_CORRUPT;
    }
    if (v->rotation == 0 && f->width % 32 == 0) rc = convert_sws(v, f, out, err, errlen);
    else rc = convert_graph(v, f, out, ow, oh, err, errlen);
    av_frame_unref(f);
    return rc;
}
