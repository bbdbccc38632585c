package footprint

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReleaseStartupPages drops this process's mappings of the read-only parts
// of its own executable (code, constants, the runtime's function tables)
// and returns how many bytes of address space it covered.
//
// Why it is safe: those segments are private file mappings that nothing
// ever writes, so every page equals the file's, and the page cache keeps
// them. madvise(MADV_DONTNEED) only unmaps them from this process; the next
// access maps the page again from the page cache (a minor fault, no disk
// read, since the other sidecars and the running code keep the file
// cached). Writable segments are left alone: they hold the program's data.
//
// Why it pays: init functions of every linked package, and the start-up
// work (flags, topology, the first etcd and gossip exchanges), touch code
// and tables spread over the whole executable, and the kernel maps each
// touched page together with its neighbours. Without the release the
// sidecar keeps all of that in its resident set for life.
func ReleaseStartupPages() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("footprint: find executable: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("footprint: read mappings: %w", err)
	}
	defer f.Close()
	spans, err := readOnlyMappings(f, exe)
	if err != nil {
		return 0, err
	}
	var released int64
	for _, s := range spans {
		// The addresses come from the kernel and are not Go memory, so
		// they go to the system call as numbers, not as a slice.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(s.start), uintptr(s.end-s.start), unix.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("footprint: madvise %#x-%#x: %w", s.start, s.end, errno)
		}
		released += int64(s.end - s.start)
	}
	return released, nil
}

// span is a mapping's address range, [start, end).
type span struct{ start, end uint64 }

// readOnlyMappings returns the mappings of path in maps (the format of
// /proc/<pid>/maps) that are neither writable nor shared.
func readOnlyMappings(maps io.Reader, path string) ([]span, error) {
	var spans []span
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// address perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 || strings.Join(f[5:], " ") != path || len(f[1]) != 4 || f[1][1] == 'w' || f[1][3] != 'p' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("footprint: mapping %q: bad address range", f[0])
		}
		spans = append(spans, span{start, end})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("footprint: read mappings: %w", err)
	}
	return spans, nil
}
