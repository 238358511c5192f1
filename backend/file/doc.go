// Package file is a coordination backend ([backend.Backend]) for the
// processes of one host that share no server: cron jobs, command-line
// tools, a few workers on one machine. They share values, locks and
// announcements through a directory.
//
// # Layout
//
// Each pipeline (namespace) gets a subdirectory of the backend's directory,
// named from a hash of the namespace. File names inside come from a
// SHA-256 hash of the key, so keys may hold any bytes; the key is stored
// inside each value file and checked on read. Directories are created with
// mode 0700 and files with 0600: only the owning user (and root) can read
// or write the values, take the locks or forge announcements. Processes
// that share a directory must run as the same user.
//
//	<dir>/ns-<hash of namespace>/
//	  mutex      flocked for a moment around every read-modify-write of lock state
//	  fence      the namespace's fence counter
//	  v/<hash>   values: a header (fence, until, key) and the bytes
//	  l/<hash>.lock   flocked by a lock's holder for as long as it holds it
//	  l/<hash>.state  the lock's grant: token, fence, expiry, last beat
//	  e/<hash>.note   written to wake the key's waiters (Notify)
//	  e/a-...         one file per announcement (Announce)
//
// # Values
//
// A value is written to a temporary file in the same directory and renamed
// over the old one, so readers see the old bytes or the new ones, never a
// mix. A Save decides under the namespace's mutex (see below), so the fence
// rules and the token check are atomic with the write across processes.
//
// # Locks
//
// A holder keeps an exclusive flock(2) on the key's lock file for as long
// as it holds the lease; the grant itself (token, fence, expiry, last beat,
// and how long after the last beat the holder counts as dead) is in the
// state file. Every read and change of a state file happens under an flock
// on the namespace's mutex file, held for the few system calls of the
// change; state files and the fence counter are written in place (a
// crash in the middle leaves a torn state, which the next TryAcquire
// takes over).
//
// TryAcquire takes the lock file's flock without waiting and reads the
// state, both under the mutex. Every flock of a lock file that is not a
// holder's (a losing TryAcquire's, the sweep's, Inspect's) is taken and
// dropped under the mutex, and a holder drops its own there too, so a
// lock file's flock is free outside the mutex unless a holder has it: a
// grant made on a free lock has the flock from its first moment, and its
// holder's death is seen at once, before its first beat as after it. The
// state then decides:
//
//   - no unexpired grant: the lock is free, it is granted;
//   - a grant whose holder had the flock, and the flock was free: the
//     holder's process is gone (the kernel drops a dead process's flocks),
//     and the lock is taken over at once ([backend.Lease.TookOver]);
//   - a grant whose last beat is older than the holder declared (two of
//     its heartbeats): the holder is stopped, hung or too slow, and the
//     lock is taken over by rewriting the state with a new token, although
//     the old holder may still have the flock. The new holder then proves
//     it lives by its beats alone, and picks the flock up at a later beat
//     once the old holder lets it go (until then, were it to crash, it
//     would be taken over two of its beats after its last one);
//   - otherwise a live holder has it: [backend.ErrNotAcquired].
//
// A holder whose grant was replaced finds out at its next beat, Save or
// Release: the token in the state file is no longer its own, so Save
// returns [backend.ErrLockLost] and writes nothing, and Extend and Release
// return [backend.ErrNotHeld]. flock(2) locks belong to the open file
// description: two holders in one process exclude each other as two
// processes do, and closing another descriptor of the same file does not
// drop a holder's lock (fcntl locks would be dropped).
//
// The mutex is taken without blocking in the kernel: a caller retries for
// as long as its context allows, so a process stopped while it holds the
// mutex (a window of a few system calls) makes the others' operations fail
// (the pipeline then fails open) rather than hang.
//
// # Fences
//
// A fence is one more than the namespace's counter, one more than the
// key's current grant and stored value, and at least the wall clock in
// microseconds; the counter is then set to it. Deleting the directory
// therefore does not make fences go backwards, as long as the host's
// clock does not step back by more than the time since the last fence.
//
// # Waking
//
// On Linux, one inotify instance per opened namespace watches its e/
// directory, which delivers notes as they are written and announcements
// as they are renamed into place, and its l/ directory: a lock file is
// opened for writing only by its holder, so its close (IN_CLOSE_WRITE)
// is a holder gone, released or dead (the kernel closes a dead process's
// files and drops their flocks). If the key's state still names a grant
// (a release clears it first, and its note wakes the waiters), the holder
// died, and the key's subscribers are woken at once: waiters need not
// wait for their poll to take a crashed holder's lock over. On other systems the e/ directory is polled every
// [Options.Poll], and a crashed holder is found at the waiters' next
// poll. When the
// watch has to be set up again (the directory was deleted, the kernel's
// event queue overflowed), every subscriber is woken and every watcher's
// onReset is called. The pipeline's own poll stays the safety net.
//
// # Limits
//
//   - Local filesystems only. NFS and other network filesystems do not
//     give flock(2), rename(2) and inotify the semantics relied on here;
//     processes on different hosts must use a server backend.
//   - One host: the clock of fences and beats is the host's own.
//   - Nothing is fsynced: values are a cache. After a power loss values
//     may be missing or old (their fences still order them), and the
//     wall clock keeps fences above those handed out before.
//   - Deleting the directory (or a namespace's subdirectory) while
//     processes run loses the values and the grants: the files are
//     recreated on the next write, a holder whose grant vanished gets
//     [backend.ErrLockLost] on its write-back, and a key may be loaded once
//     more. Callers see no error from it: the pipeline fails open on the
//     errors of the moment.
//   - flock(2) is not available on Windows: there, [New] fails.
package file
