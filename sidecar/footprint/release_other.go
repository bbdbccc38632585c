//go:build !linux

package footprint

// ReleaseStartupPages does nothing outside Linux, where the sidecar runs in
// production; it reports 0 bytes.
func ReleaseStartupPages() (int64, error) { return 0, nil }
