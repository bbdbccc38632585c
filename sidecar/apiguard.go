package sidecar

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/ringside/ringside/trainer/api"
)

// The modes of what the API puts in the socket's directory, set explicitly
// so that no umask loosens them: the directory is the pod's, the socket
// and the token file its containers' that share the directory's group.
const (
	socketDirMode = 0o750
	socketMode    = 0o660
	tokenMode     = 0o640
)

// callerKey keys the caller's credentials in a request's context.
type callerKey struct{}

// caller is who is on the other end of an API connection.
type caller struct {
	// cred is the peer process's, from SO_PEERCRED; nil on TCP or when
	// the kernel did not say.
	cred *unix.Ucred
}

// connContext records the peer's credentials of each unix socket
// connection for authorize.
func connContext(ctx context.Context, c net.Conn) context.Context {
	var who caller
	if uc, ok := c.(*net.UnixConn); ok {
		who.cred = peerCred(uc)
	}
	return context.WithValue(ctx, callerKey{}, who)
}

func peerCred(c *net.UnixConn) *unix.Ucred {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) { //nolint:errcheck // cred stays nil
		cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	return cred
}

// errNotTheTrainer is the refusal of a caller that is not the pod's own
// trainer.
var errNotTheTrainer = errors.New("this endpoint serves only this pod's trainer: call it over the unix socket " +
	"from a process of the sidecar's uid (or one --api-allow-uids / --api-allow-gids allows), " +
	"or send the content of the API token file in the " + api.TokenHeader + " header")

// authorize reports whether r comes from the pod's own trainer (see
// api.TokenHeader).
func (a *Agent) authorize(r *http.Request) error {
	if tok := r.Header.Get(api.TokenHeader); tok != "" && a.apiToken != "" {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(a.apiToken)) == 1 {
			return nil
		}
		return errNotTheTrainer
	}
	who, _ := r.Context().Value(callerKey{}).(caller)
	if c := who.cred; c != nil {
		if int(c.Uid) == os.Geteuid() || slices.Contains(a.cfg.APIAllowUIDs, int(c.Uid)) || slices.Contains(a.cfg.APIAllowGIDs, int(c.Gid)) {
			return nil
		}
	}
	return errNotTheTrainer
}

// trainerOnly wraps h so that only the pod's trainer reaches it.
func (a *Agent) trainerOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := a.authorize(r); err != nil {
			a.metrics.apiRefused.Inc()
			writeError(w, http.StatusForbidden, err.Error())
			return
		}
		h(w, r)
	}
}

// listenSocket listens on the unix socket at path, in a directory of mode
// socketDirMode, with the socket itself socketMode. A directory the sidecar
// does not own or that is shared by everyone (sticky, as /tmp) keeps its
// mode: the socket's mode and the peer check still guard the API.
func (a *Agent) listenSocket(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	sockMode, dirMode := a.socketModes()
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("API socket dir: %w", err)
	}
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("API socket dir: %w", err)
	} else if sys, ok := st.Sys().(*unix.Stat_t); ok && int(sys.Uid) == os.Geteuid() && st.Mode()&fs.ModeSticky == 0 {
		if err := os.Chmod(dir, dirMode); err != nil {
			return nil, fmt.Errorf("API socket dir: %w", err)
		}
	} else {
		a.log.Warn("the API socket's directory is not the sidecar's own; its mode stays", "dir", dir, "mode", st.Mode().Perm().String())
	}
	os.Remove(path) // a stale socket of an earlier run
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("API socket: %w", err)
	}
	if err := os.Chmod(path, sockMode); err != nil {
		l.Close()
		return nil, fmt.Errorf("API socket: %w", err)
	}
	return l, nil
}

// socketModes are the modes of the API socket and of its directory when
// the sidecar owns it: socketMode and socketDirMode, or open to every uid
// when the sidecar is told to allow others (a non-root sidecar beside a
// trainer of another user and group), which could not connect otherwise;
// the peer check then decides who is the trainer.
func (a *Agent) socketModes() (socket, dir fs.FileMode) {
	if len(a.cfg.APIAllowUIDs)+len(a.cfg.APIAllowGIDs) > 0 {
		return 0o666, 0o755
	}
	return socketMode, socketDirMode
}

// writeToken writes a new random API token to path, mode tokenMode, by a
// rename so that a reader never sees half of it.
func writeToken(path string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("API token: %w", err)
	}
	token := hex.EncodeToString(b)
	tmp := path + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, tokenMode)
	if err != nil {
		return "", fmt.Errorf("API token file: %w", err)
	}
	_, werr := f.WriteString(token + "\n")
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, tokenMode)); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("API token file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("API token file: %w", err)
	}
	return token, nil
}

// tokenPath is where the API token is written: the configured path, else
// beside the socket (api.TokenPath).
func (c Config) tokenPath() string {
	if c.APITokenFile != "" {
		return c.APITokenFile
	}
	if c.Socket == "" {
		return ""
	}
	return api.TokenPath(c.Socket)
}

// checkHTTPAddr accepts a loopback TCP address (an IP of 127.0.0.0/8 or
// ::1, or localhost) unless others are allowed.
func checkHTTPAddr(addr string, allowOthers bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("http address %q: want host:port: %w", addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("http address %q: bad port", addr)
	}
	if allowOthers {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("http address %q is not a loopback address: the trainer API serves the pod's own trainer; "+
		"use 127.0.0.1:PORT, or pass --http-allow-non-loopback to serve it on %q (callers then need the API token)", addr, host)
}
