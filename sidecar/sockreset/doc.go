// Package sockreset destroys this network namespace's TCP connections to a
// peer, the way `ss -K dst IP` does, so that a trainer blocked in a
// collective on a silent peer fails at once instead of waiting out its group
// timeout.
//
// A peer that was killed resets its connections itself; one that froze, lost
// its node or sits behind a partition does not, and the survivors' collective
// (NCCL, gloo) blocks until its timeout: minutes. Once gossip declares the
// peer dead, the sidecar, which shares the pod's network namespace with the
// trainer, calls [Resetter.Reset] with the peer's IP. The kernel aborts each
// matching socket (SOCK_DESTROY over the sock_diag netlink interface), the
// blocked read or write returns ECONNABORTED, and the trainer re-forms its
// group without the peer.
//
// It needs CAP_NET_ADMIN in the pod's network namespace and a kernel built
// with CONFIG_INET_DIAG_DESTROY. Without either, Reset returns
// [ErrUnsupported] and the Resetter warns once; failure detection goes on,
// only the trainer learns of the death later.
package sockreset
