package netopt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// sysfs reads attribute files under a root that stands for /sys and collects
// a warning for every file it had to skip. A sysfs file can be missing
// (older kernel, other driver), fail to read (EINVAL is how the kernel says
// "no value here", for example an unpopulated GID type inside a container),
// or hold something unexpected; none of that may stop detection.
type sysfs struct {
	root     string
	warnings []string
}

// path joins rel (slash-separated, relative to the root) onto the root.
func (s *sysfs) path(rel string) string {
	return filepath.Join(s.root, filepath.FromSlash(rel))
}

// warnf records a warning about rel.
func (s *sysfs) warnf(rel, format string, args ...any) {
	s.warnings = append(s.warnings, rel+": "+fmt.Sprintf(format, args...))
}

// read returns the trimmed content of rel. A missing file is reported with
// fs.ErrNotExist so callers can tell "absent" from "unreadable".
func (s *sysfs) read(rel string) (string, error) {
	b, err := os.ReadFile(s.path(rel))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// optional reads rel; a missing file gives "" quietly, an unreadable one ""
// with a warning.
func (s *sysfs) optional(rel string) string {
	v, err := s.read(rel)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.warnf(rel, "unreadable (%s), ignored", shortErr(err))
	}
	return v
}

// required reads rel and warns when it is missing or unreadable.
func (s *sysfs) required(rel, consequence string) (string, bool) {
	v, err := s.read(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.warnf(rel, "missing; %s", consequence)
		return "", false
	case err != nil:
		s.warnf(rel, "unreadable (%s); %s", shortErr(err), consequence)
		return "", false
	case v == "":
		s.warnf(rel, "empty; %s", consequence)
		return "", false
	}
	return v, true
}

// int reads rel as a decimal or 0x-prefixed integer. ok is false when the
// file is missing, unreadable or holds anything else (with a warning for the
// last two).
func (s *sysfs) int(rel, consequence string) (int, bool) {
	v, err := s.read(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false
	}
	if err != nil {
		s.warnf(rel, "unreadable (%s); %s", shortErr(err), consequence)
		return 0, false
	}
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil {
		s.warnf(rel, "unexpected value %q; %s", clip(v), consequence)
		return 0, false
	}
	return int(n), true
}

// list returns the sorted entry names of directory rel; a missing directory
// is an empty list.
func (s *sysfs) list(rel string) []string {
	entries, err := os.ReadDir(s.path(rel))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.warnf(rel, "unreadable directory (%s), skipped", shortErr(err))
		}
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// exists reports whether rel exists (following symlinks).
func (s *sysfs) exists(rel string) bool {
	_, err := os.Stat(s.path(rel))
	return err == nil
}

var (
	bdfPattern     = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	pciRootPattern = regexp.MustCompile(`^pci[0-9a-f]{4}:[0-9a-f]{2}$`)
)

// pciChain resolves the symlink rel (a "device" link or a bus/pci/devices
// entry) and returns the PCI components of its target, root complex first:
// ["pci0000:00", "0000:00:01.0", ..., "0000:1a:00.0"]. Components after
// the last PCI address (virtio0, net/eth0) are dropped. ok is false when the
// link does not lead into the PCI tree.
func (s *sysfs) pciChain(rel string) ([]string, bool) {
	real, err := filepath.EvalSymlinks(s.path(rel))
	if err != nil {
		return nil, false
	}
	root, err := filepath.EvalSymlinks(s.root)
	if err != nil {
		return nil, false
	}
	inside, err := filepath.Rel(root, real)
	if err != nil {
		return nil, false
	}
	parts := strings.Split(filepath.ToSlash(inside), "/")
	start, end := -1, -1
	for i, p := range parts {
		if start < 0 && pciRootPattern.MatchString(p) {
			start = i
		}
		if start >= 0 && bdfPattern.MatchString(p) {
			end = i
		}
	}
	if start < 0 || end < 0 {
		return nil, false
	}
	return parts[start : end+1], true
}

// shortErr drops the path from a *fs.PathError: warnings already name it.
func shortErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// clip shortens garbage before it goes into a warning.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
