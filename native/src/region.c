/*
 * region.c - device memory accounting shared by every process of a container.
 *
 * The state lives in a small file (GPUPOOL_SHARED_FILE, default /tmp/.gpupool-usage-v2; /tmp is
 * private to a container, while /dev/shm is shared by all containers of a pod) mapped MAP_SHARED
 * by each process. The device plugin points it at a host folder of its own per container, so the
 * node agent can read it too. It holds one entry per live process: pid, process start time, bytes
 * in use per device row; and the time of the container's last charge or credit. The container's
 * usage of a device is the sum over live entries, computed under the lock each time; there is no
 * separate running total that a crash could leave inconsistent.
 *
 * Readers outside the container (the agent) take no lock: every field they read is one aligned
 * 64-bit (or 32-bit) store, and the header's first 32 bytes have the same layout on every ABI, with
 * procs_offset saying where the entries start (the mutex before them differs in size).
 *
 * Lock choice: a process-shared *robust* pthread mutex inside the mapping. When a holder is
 * SIGKILLed the kernel walks its robust list at exit and the next locker gets EOWNERDEAD; it calls
 * pthread_mutex_consistent() and carries on. Every update made under the lock is a single aligned
 * 64-bit store into the holder's own entry, so there is never a half-written state to repair, only
 * dead entries to reap. We prefer it to fcntl/flock (which the kernel also drops on death) because
 * the uncontended path is a user-space atomic, not two system calls per allocation, and it does
 * not depend on the file system under /tmp supporting locks. flock *is* used once, to serialise
 * the creation and first initialisation of the file, where a robust mutex cannot exist yet.
 *
 * Dead processes: an entry is dead when /proc/<pid>/stat shows a zombie or a different start
 * time (pid reuse), or when kill(pid, 0) fails with ESRCH (no /proc, or /proc mounted hidepid=2
 * and the process belongs to another user: EPERM means alive). Reaping runs when an allocation
 * would exceed the limit, when usage is reported, and after a lock holder died; a process that
 * exits normally removes its own entry from a destructor.
 */
#include "region.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define GP_REGION_MAGIC 0x31306c6f6f707067ULL /* "gppool01" */
#define GP_REGION_VERSION 2u
#define GP_MAX_PROCS 1024
#define GP_DEFAULT_SHARED_FILE "/tmp/.gpupool-usage-v2"

typedef struct {
    volatile int32_t pid; /* 0: free */
    uint32_t pad;
    volatile uint64_t start_time; /* /proc/<pid>/stat field 22; 0 when unknown */
    volatile uint64_t used[GP_MAX_ROWS];
} gp_proc_t;

typedef struct {
    volatile uint64_t magic;
    uint32_t version;
    uint32_t size;
    uint32_t procs_offset;            /* for readers outside the container: where procs[] starts */
    volatile uint32_t hw;             /* entries [0, hw) may be in use */
    volatile uint64_t last_active_ns; /* CLOCK_REALTIME of the last charge or credit; 0: none */
    uint64_t limit[GP_MAX_ROWS]; /* informational: the limits of the last process that started */
    pthread_mutex_t lock;
    gp_proc_t procs[GP_MAX_PROCS];
} gp_region_t;

static gp_region_t *R;
static int my_slot = -1;
static pid_t my_pid;
static int proc_fs_ok;

static int read_proc_stat(pid_t pid, char *state, uint64_t *start) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ESRCH ? -1 : -2;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -2;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    if (p == NULL || p[1] != ' ') return -2;
    p += 2;
    *state = *p;
    /* after ')' come fields 3 (state) .. ; starttime is field 22, i.e. 19 more fields on */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL) return -2;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 0;
}

static int entry_is_dead(const gp_proc_t *e) {
    pid_t pid = e->pid;
    if (proc_fs_ok) {
        char state = 0;
        uint64_t start = 0;
        int r = read_proc_stat(pid, &state, &start);
        /* ENOENT: gone, unless /proc hides other users' processes (hidepid=2); kill() decides. */
        if (r == -1) return kill(pid, 0) == -1 && errno == ESRCH;
        if (r == 0) {
            if (state == 'Z' || state == 'X' || state == 'x') return 1;
            return e->start_time != 0 && start != e->start_time;
        }
    }
    return kill(pid, 0) == -1 && errno == ESRCH;
}

static void reap_locked(void) {
    pid_t me = getpid();
    uint32_t hw = R->hw;
    for (uint32_t i = 0; i < hw && i < GP_MAX_PROCS; i++) {
        gp_proc_t *e = &R->procs[i];
        /* Only our own slot is surely alive. An entry of our pid in another slot was left by a
         * process of an earlier instance of the container (its folder outlives it, and in a
         * new pid namespace the pid comes again): its start time tells. */
        if (e->pid == 0 || ((int)i == my_slot && e->pid == me) || !entry_is_dead(e)) continue;
        for (int r = 0; r < GP_MAX_ROWS; r++) {
            if (e->used[r] != 0)
                gp_log(GP_INFO, "reclaiming %llu bytes on device row %d from dead pid %d",
                       (unsigned long long)e->used[r], r, (int)e->pid);
            e->used[r] = 0;
        }
        e->start_time = 0;
        e->pid = 0;
    }
    while (hw > 0 && R->procs[hw - 1].pid == 0) hw--;
    R->hw = hw;
}

static int lock_region(void) {
    int rc = pthread_mutex_lock(&R->lock);
    if (rc == EOWNERDEAD) {
        /* The previous holder died holding the lock. Its entry is consistent (single stores); it
         * is dead, so reap it, then mark the mutex usable again. */
        gp_log(GP_INFO, "previous lock holder died; recovering the shared accounting lock");
        pthread_mutex_consistent(&R->lock);
        reap_locked();
        return 0;
    }
    if (rc != 0) {
        gp_log(GP_ERROR, "cannot take the shared accounting lock: %s", strerror(rc));
        return -1;
    }
    return 0;
}

static void unlock_region(void) { pthread_mutex_unlock(&R->lock); }

/* Under the lock: the container touched device memory now (the agent's "last activity"). */
static void mark_active_locked(void) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) == 0)
        R->last_active_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static uint64_t own_start_time(void) {
    char state;
    uint64_t start = 0;
    if (!proc_fs_ok || read_proc_stat(getpid(), &state, &start) != 0) return 0;
    return start;
}

static int ensure_slot_locked(void) {
    /* my_slot is reset in the child by the pthread_atfork handler, so a valid slot whose entry
     * still carries our pid is ours without asking the kernel for getpid() on every call. */
    if (my_slot >= 0 && R->procs[my_slot].pid == my_pid) return my_slot;
    pid_t me = getpid();
    my_slot = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        uint32_t hw = R->hw;
        int found = -1;
        for (uint32_t i = 0; i < hw; i++) {
            if (R->procs[i].pid == 0) {
                found = (int)i;
                break;
            }
        }
        if (found < 0 && hw < GP_MAX_PROCS) {
            found = (int)hw;
            R->hw = hw + 1;
        }
        if (found >= 0) {
            gp_proc_t *e = &R->procs[found];
            for (int r = 0; r < GP_MAX_ROWS; r++) e->used[r] = 0;
            e->start_time = own_start_time();
            __atomic_store_n(&e->pid, me, __ATOMIC_RELEASE);
            my_slot = found;
            my_pid = me;
            return found;
        }
        reap_locked();
    }
    gp_log(GP_ERROR, "more than %d processes in this container use the GPU", GP_MAX_PROCS);
    return -1;
}

static uint64_t used_locked(int row) {
    uint64_t sum = 0;
    uint32_t hw = R->hw;
    for (uint32_t i = 0; i < hw && i < GP_MAX_PROCS; i++)
        if (R->procs[i].pid != 0) sum = gp_sat_add(sum, R->procs[i].used[row]);
    return sum;
}

static void init_fresh(gp_region_t *r) {
    memset(r, 0, sizeof *r);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&r->lock, &a);
    pthread_mutexattr_destroy(&a);
    r->version = GP_REGION_VERSION;
    r->size = (uint32_t)sizeof *r;
    r->procs_offset = (uint32_t)offsetof(gp_region_t, procs);
    __atomic_store_n(&r->magic, GP_REGION_MAGIC, __ATOMIC_RELEASE);
}

static gp_region_t *map_private(const char *why) {
    gp_log(GP_WARN, "%s; accounting this process alone", why);
    void *p = mmap(NULL, sizeof(gp_region_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    init_fresh((gp_region_t *)p);
    return (gp_region_t *)p;
}

static gp_region_t *map_file(const char *path) {
    char why[512];
    /* Open an existing file without O_CREAT first: with fs.protected_regular (on by default in
     * many distributions) an O_CREAT open of another user's file in sticky /tmp fails. */
    int fd = -1;
    for (int attempt = 0; attempt < 3 && fd < 0; attempt++) {
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 && errno == ENOENT) {
            fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
            if (fd < 0 && errno == EEXIST) continue; /* another process created it: reopen */
        }
        if (fd < 0) break;
    }
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot open shared accounting file %s: %s", path, strerror(errno));
        return map_private(why);
    }
    (void)fchmod(fd, 0666); /* processes of one container may run as different users */
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    gp_region_t *r = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, sizeof why, "cannot stat %s: %s", path, strerror(errno));
    } else if (st.st_size != 0 && st.st_size != (off_t)sizeof(gp_region_t)) {
        snprintf(why, sizeof why, "%s has an unexpected size (another libgpupool version?)", path);
    } else if (st.st_size == 0 && ftruncate(fd, (off_t)sizeof(gp_region_t)) != 0) {
        snprintf(why, sizeof why, "cannot size %s: %s", path, strerror(errno));
    } else {
        void *p = mmap(NULL, sizeof(gp_region_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(why, sizeof why, "cannot map %s: %s", path, strerror(errno));
        } else {
            r = (gp_region_t *)p;
            if (__atomic_load_n(&r->magic, __ATOMIC_ACQUIRE) != GP_REGION_MAGIC) {
                init_fresh(r);
            } else if (r->version != GP_REGION_VERSION || r->size != sizeof(gp_region_t)) {
                munmap(p, sizeof(gp_region_t));
                r = NULL;
                snprintf(why, sizeof why, "%s was written by another libgpupool version", path);
            }
        }
    }
    flock(fd, LOCK_UN);
    close(fd);
    return r != NULL ? r : map_private(why);
}

void gp_region_init(const uint64_t *limits, int n) {
    proc_fs_ok = access("/proc/self/stat", R_OK) == 0;
    const char *path = getenv("GPUPOOL_SHARED_FILE");
    if (path == NULL || path[0] == '\0') path = GP_DEFAULT_SHARED_FILE;
    R = map_file(path);
    if (R == NULL) {
        gp_log(GP_ERROR, "cannot map any accounting memory");
        return;
    }
    for (int i = 0; i < n && i < GP_MAX_ROWS; i++) R->limit[i] = limits[i];
    /* A restarted container keeps its host folder: drop what its previous processes left, so
     * what the agent reads is the live processes' memory from the first call on. */
    if (lock_region() == 0) {
        reap_locked();
        unlock_region();
    }
}

int gp_region_reserve(int row, uint64_t bytes, uint64_t limit) {
    if (R == NULL || row < 0 || row >= GP_MAX_ROWS) return -1;
    if (lock_region() != 0) return -1;
    int slot = ensure_slot_locked();
    int ok = -1;
    if (slot >= 0) {
        uint64_t used = used_locked(row);
        if (gp_sat_add(used, bytes) > limit) {
            reap_locked();
            used = used_locked(row);
        }
        if (gp_sat_add(used, bytes) <= limit) {
            R->procs[slot].used[row] = gp_sat_add(R->procs[slot].used[row], bytes);
            mark_active_locked();
            ok = 0;
        }
    }
    unlock_region();
    return ok;
}

void gp_region_release(int row, uint64_t bytes) {
    if (R == NULL || row < 0 || row >= GP_MAX_ROWS) return;
    if (lock_region() != 0) return;
    if (my_slot >= 0 && R->procs[my_slot].pid == my_pid) {
        R->procs[my_slot].used[row] = gp_sat_sub(R->procs[my_slot].used[row], bytes);
        mark_active_locked();
    }
    unlock_region();
}

uint64_t gp_region_used(int row) {
    if (R == NULL || row < 0 || row >= GP_MAX_ROWS) return 0;
    if (lock_region() != 0) return UINT64_MAX;
    reap_locked();
    uint64_t used = used_locked(row);
    unlock_region();
    return used;
}

void gp_region_process_exit(void) {
    if (R == NULL || my_slot < 0 || my_pid != getpid()) return;
    if (lock_region() != 0) return;
    gp_proc_t *e = &R->procs[my_slot];
    if (e->pid == my_pid) {
        for (int r = 0; r < GP_MAX_ROWS; r++) e->used[r] = 0;
        e->start_time = 0;
        __atomic_store_n(&e->pid, 0, __ATOMIC_RELEASE);
    }
    my_slot = -1;
    unlock_region();
}

void gp_region_after_fork_child(void) { my_slot = -1; }

int gp_region_test_hold_lock(void) {
    if (R == NULL) return -1;
    return lock_region();
}
