/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Frame dispatch: the one place that maps a worker's frame to what handles
 * it. OPEN starts a session, a transfer, a port connection or a one-shot operation by its
 * request's op; DATA, WINDOW, EOF, CONTROL and CANCEL go to the session,
 * transfer or port connection that owns the channel. It also tells sessions and transfers when
 * a connection ends or drains (ag_dispatch, the handlers conn.c calls).
 */
#include <fcntl.h>
#include <linux/random.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "space/cleanup.h"
#include "space/json.h"

/* A VM restored from a copy of another's memory (a template's base snapshot)
 * holds that VM's generator state: mixes the worker's fresh bytes in, credits
 * them, and makes the kernel reseed at once, before anything else runs
 * (RNDRESEEDCRNG). EPERM in a jail: its kernel is the host's. */
static bool reseed(const uint8_t *seed, size_t len)
{
        struct rand_pool_info *in = calloc(1, sizeof(*in) + len);
        if (!in)
                return false;
        in->entropy_count = (int)(len * 8);
        in->buf_size = (int)len;
        memcpy(in->buf, seed, len);
        int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
        bool ok = fd >= 0 && ioctl(fd, RNDADDENTROPY, in) == 0 && ioctl(fd, RNDRESEEDCRNG) == 0;
        if (fd >= 0)
                close(fd);
        explicit_bzero(in->buf, len);
        free(in);
        return ok;
}

static int on_open(ag_conn *c, const pr_agent_frame *f, sp_error **err)
{
        pr_agent_request req;
        _cleanup_error_ sp_error *e = NULL;
        if (pr_agent_request_parse(f->payload, f->length, &req, &e) < 0) {
                /* A bad request fails that channel, not the connection. */
                ag_conn_send_error(c, f->channel, e);
                return 0;
        }
        int r = 0;
        switch (req.op) {
        case PR_OP_EXEC:
                r = ag_session_exec(c, f->channel, &req, &e);
                break;
        case PR_OP_ATTACH:
                r = ag_session_attach(c, f->channel, &req, &e);
                break;
        case PR_OP_RELEASE:
                r = ag_session_release(req.session, &e);
                if (r == 0) {
                        _cleanup_json_ json_object *o = json_object_new_object();
                        ag_conn_send_json(c, PR_AGENT_EXIT, f->channel, o);
                }
                break;
        case PR_OP_READ:
        case PR_OP_WRITE:
                r = ag_transfer_start(c, f->channel, &req, &e);
                break;
        case PR_OP_CONNECT:
                r = ag_port_connect(c, f->channel, &req, &e);
                break;
        case PR_OP_PING: {
                /* Blocks the loop for as long as the disk takes: only a suspend asks.
                 * The sandbox's root filesystem only: in a jail, sync() would flush
                 * every filesystem of the host. */
                if (req.sync) {
                        int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (root < 0 || syncfs(root) < 0)
                                sync();
                        if (root >= 0)
                                close(root);
                }
                _cleanup_json_ json_object *o = json_object_new_object();
                if (req.time_ns > 0) {
                        /* A VM restored from its memory state: its clock stood still while it was saved. In
                         * a jail the host's clock is not the sandbox's to set (EPERM), and it never stops. */
                        struct timespec ts = {.tv_sec = req.time_ns / 1000000000, .tv_nsec = req.time_ns % 1000000000};
                        json_object_object_add(o, "clock_set",
                                               json_object_new_boolean(clock_settime(CLOCK_REALTIME, &ts) == 0));
                }
                if (req.seed_len)
                        json_object_object_add(o, "reseeded", json_object_new_boolean(reseed(req.seed, req.seed_len)));
                if (req.hostname)
                        json_object_object_add(
                                o, "hostname_set",
                                json_object_new_boolean(sethostname(req.hostname, strlen(req.hostname)) == 0));
                json_object_object_add(o, "uptime_ms", json_object_new_int64(ag_now_ms()));
                json_object_object_add(o, "sessions", json_object_new_int64((int64_t)ag_session_count()));
                ag_conn_send_json(c, PR_AGENT_EXIT, f->channel, o);
                break;
        }
        default:
                ag_files_simple(c, f->channel, &req);
                break;
        }
        if (r < 0)
                ag_conn_send_error(c, f->channel, e);
        pr_agent_request_free(&req);
        (void)err;
        return 0;
}

static int on_frame(ag_conn *c, const pr_agent_frame *f, sp_error **err)
{
        switch (f->type) {
        case PR_AGENT_OPEN:
                return on_open(c, f, err);
        case PR_AGENT_DATA:
        case PR_AGENT_WINDOW:
        case PR_AGENT_EOF:
        case PR_AGENT_CONTROL:
        case PR_AGENT_CANCEL:
                if (ag_session_frame(c, f, err) || ag_transfer_frame(c, f, err) || ag_port_frame(c, f, err))
                        return err && *err ? -SP_E_INVALID : 0;
                if (err && *err)
                        return -SP_E_INVALID;
                /* A frame for a channel that already ended: harmless after CANCEL races. */
                return 0;
        default:
                return sp_error_set(err, SP_E_INVALID, "unexpected frame type %u from the worker", f->type);
        }
}

/* The connection is gone: its sessions keep running detached, its transfers end. */
static void on_closed(ag_conn *c)
{
        ag_session_conn_closed(c);
        ag_transfer_conn_closed(c);
        ag_port_conn_closed(c);
}

static void on_drained(ag_conn *c)
{
        ag_session_pump_all(c);
        ag_transfer_pump_all(c);
        ag_port_pump_all(c);
}

const ag_conn_handlers ag_dispatch = {.frame = on_frame, .closed = on_closed, .drained = on_drained};
