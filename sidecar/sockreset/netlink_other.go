//go:build !linux

package sockreset

import (
	"context"
	"fmt"
	"net"
	"runtime"
)

// destroyTCP has nothing to work with outside Linux.
func destroyTCP(context.Context, net.IP) (int, error) {
	return 0, fmt.Errorf("%w: %s has no sock_diag netlink interface", ErrUnsupported, runtime.GOOS)
}
