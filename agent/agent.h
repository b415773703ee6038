/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-agent internals. The agent is PID 1 of a sandbox: a single-threaded
 * epoll loop that accepts worker connections (proto/spec/agent.md), runs
 * command sessions, serves file operations and reaps orphans.
 *
 * Its files form layers (drawn in main.c's header comment): each calls only
 * the layers below it. Declarations below are grouped by layer, lowest first.
 */
#ifndef SPACE_AGENT_H
#define SPACE_AGENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "conn.h"
#include "loop.h"
#include "space/agent_proto.h"
#include "space/buf.h"
#include "space/error.h"
#include "space/log.h"

typedef struct ag_session ag_session;
typedef struct ag_transfer ag_transfer;
typedef struct ag_port ag_port;

/* ===== leaves: no other agent file ===== */

/* --- jail entry (enter.c) --- */
/* The jail's last steps: enters the sandbox's user namespace held by
 * userns_fd, a new mount and cgroup namespace, becomes its root and makes the
 * agent non-dumpable, then closes sync_fd. On failure it writes why on
 * sync_fd and exits with status 126. */
void ag_enter_jail(int userns_fd, int sync_fd);

/* --- a VM's init (vm.c) --- */
/* As /init of a VM: mounts /dev, /proc and /sys, loads the initramfs's
 * modules, makes the sandbox's disk the root, sets the hostname and brings
 * the loopback up; returns the agent's virtio-serial port (non-blocking) and
 * sets *level from space.log=. Exits (ending the VM) on failure. */
int ag_vm_init(sp_log_level *level);

/* --- process trees (proc.c) --- */
/* Opens the /proc the agent sees now, for every later reading of process
 * state: a /proc that root in the sandbox mounts later is ignored. Call once
 * before serving; ag_proc_kill_tree() calls it if needed. */
void ag_proc_init(void);
/* Sends sig to every process of session sid and to their descendants. Returns how many. */
int ag_proc_kill_tree(pid_t sid, int sig);

/* --- users (users.c) --- */
typedef struct ag_user {
        uid_t uid;
        gid_t gid;
        char name[64];
        char home[512];
        char shell[256];
        gid_t groups[64];
        int ngroups;
} ag_user;

/* Looks up a user by name or numeric id in the sandbox's /etc/passwd and
 * /etc/group (no NSS: the agent is static). NULL name means root. */
int ag_user_lookup(const char *name, ag_user *ret, sp_error **err);
/* Resolves a request path: absolute as is, relative to the user's home. */
int ag_path_resolve(const ag_user *u, const char *path, char *out, size_t outlen, sp_error **err);
/* The name of id in db ("/etc/passwd" for a uid, "/etc/group" for a gid:
 * both keep the id in their third field) into out; -1 when none has it
 * (or the name does not fit). */
int ag_id_name(const char *db, unsigned long id, char *out, size_t outlen);

/* ===== layers 0 and 1: the event loop (loop.h), connections (conn.h) ===== */

/* ===== layer 2: output streams (stream.c) — uses conn, loop ===== */

/* One direction of output from the agent (stdout, stderr, file content):
 * buf holds [acked, produced) — what the worker has not yet acknowledged —
 * and `sent` marks how much of it went out on the current connection. */
typedef struct ag_outstream {
        int fd; /* pipe or file being read, -1 when closed */
        ag_watch watch;
        bool eof; /* fd reached end (or closed) */
        bool eof_sent; /* EOF frame sent on the current channel */
        int64_t acked; /* offset of buf.data[0] */
        size_t sent; /* bytes of buf already sent on the current channel */
        uint64_t credit;
        sp_buf buf;
        uint32_t window; /* retention bound: the initial credit */
} ag_outstream;

void ag_outstream_init(ag_outstream *s, int fd, uint32_t window);
void ag_outstream_close_fd(ag_outstream *s);
void ag_outstream_free(ag_outstream *s);
/* Reads from fd into buf while retention allows. Returns bytes read, 0 at EOF
 * (sets eof), -1 if it would block or no room. */
ssize_t ag_outstream_fill(ag_outstream *s);
/* Sends what credit allows on (c, channel). Returns true if anything went out. */
bool ag_outstream_flush(ag_outstream *s, ag_conn *c, uint32_t channel, uint8_t stream);
/* Applies a WINDOW acknowledgement of n bytes. */
int ag_outstream_ack(ag_outstream *s, uint32_t n, sp_error **err);
/* Rewinds for a new channel: drop what the worker holds (< offset) and resend the rest. */
int ag_outstream_rewind(ag_outstream *s, int64_t offset, uint32_t window, sp_error **err);
/* True while there is room to read more from fd. */
bool ag_outstream_wants_input(const ag_outstream *s);
/* True when everything was read, sent and EOF sent. */
bool ag_outstream_done(const ag_outstream *s);

/* ===== layer 3: sessions, files and ports — use stream, conn, loop and the leaves ===== */

/* --- sessions (session.c) --- */
int ag_session_exec(ag_conn *c, uint32_t channel, pr_agent_request *req, sp_error **err);
int ag_session_attach(ag_conn *c, uint32_t channel, const pr_agent_request *req, sp_error **err);
int ag_session_release(const char *id, sp_error **err);
/* Frames for a channel that belongs to a session (DATA stdin, EOF, WINDOW, CONTROL, CANCEL). */
bool ag_session_frame(ag_conn *c, const pr_agent_frame *f, sp_error **err);
/* A child exited (the loop's child hook). Returns true if it was a session's. */
bool ag_session_reaped(pid_t pid, int status);
/* The connection is gone: detach its channels (commands keep running). */
void ag_session_conn_closed(ag_conn *c);
/* Resume producing on every session of c (its queue drained). */
void ag_session_pump_all(ag_conn *c);
/* Signals every session's process tree (agent shutdown). */
void ag_session_signal_all(int sig);
size_t ag_session_count(void);

/* --- files (files.c) --- */
/* Runs a one-shot file op (stat, list, mkdir, move, remove, chmod) and sends EXIT. */
void ag_files_simple(ag_conn *c, uint32_t channel, const pr_agent_request *req);
/* Starts a streamed read or write. */
int ag_transfer_start(ag_conn *c, uint32_t channel, pr_agent_request *req, sp_error **err);
bool ag_transfer_frame(ag_conn *c, const pr_agent_frame *f, sp_error **err);
void ag_transfer_conn_closed(ag_conn *c);
void ag_transfer_pump_all(ag_conn *c);

/* --- port connections (port.c) --- */
/* Starts a connection to req->port on the sandbox's loopback (spec: "Port connections"). */
int ag_port_connect(ag_conn *c, uint32_t channel, const pr_agent_request *req, sp_error **err);
bool ag_port_frame(ag_conn *c, const pr_agent_frame *f, sp_error **err);
void ag_port_conn_closed(ag_conn *c);
void ag_port_pump_all(ag_conn *c);

/* ===== layer 4: dispatch (dispatch.c) — uses sessions, files, conn, loop ===== */

/* The connection handlers: frames to sessions and transfers, a closed
 * connection detaching its sessions and ending its transfers, a drained one
 * pumping them. main.c passes it to ag_conn_listen_add(). */
extern const ag_conn_handlers ag_dispatch;

#endif
