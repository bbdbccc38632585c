package sockreset

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
)

var errNoPermission = errors.New("operation not permitted")

func TestUnsupportedIsWarnedOnceAndRemembered(t *testing.T) {
	var logs bytes.Buffer
	r := New(slog.New(slog.NewTextHandler(&logs, nil)))
	calls := 0
	r.destroy = func(context.Context, net.IP) (int, error) {
		calls++
		return 0, errors.Join(ErrUnsupported, errNoPermission)
	}
	for i := range 3 {
		n, err := r.Reset(context.Background(), net.IPv4(10, 0, 0, 9))
		if n != 0 || !errors.Is(err, ErrUnsupported) || !errors.Is(err, errNoPermission) {
			t.Fatalf("call %d: %d, %v; want 0 and ErrUnsupported wrapping the cause", i, n, err)
		}
	}
	if calls != 1 {
		t.Errorf("tried the kernel %d times, want 1", calls)
	}
	if got := strings.Count(logs.String(), "level=WARN"); got != 1 {
		t.Errorf("logged %d warnings, want 1:\n%s", got, logs.String())
	}
}

func TestOtherErrorsAreNotRemembered(t *testing.T) {
	var logs bytes.Buffer
	r := New(slog.New(slog.NewTextHandler(&logs, nil)))
	results := []error{errors.New("socket went away"), nil}
	calls := 0
	r.destroy = func(context.Context, net.IP) (int, error) {
		err := results[calls]
		calls++
		return 1, err
	}
	peer := net.IPv4(10, 0, 0, 9)
	if _, err := r.Reset(context.Background(), peer); err == nil || errors.Is(err, ErrUnsupported) {
		t.Fatalf("first call: %v, want the plain error", err)
	}
	if n, err := r.Reset(context.Background(), peer); n != 1 || err != nil {
		t.Fatalf("second call: %d, %v; want 1, nil", n, err)
	}
	if logs.Len() != 0 {
		t.Errorf("logged:\n%s", logs.String())
	}
}

func TestResetRefusesANonAddress(t *testing.T) {
	r := New(slog.New(slog.DiscardHandler))
	r.destroy = func(context.Context, net.IP) (int, error) {
		t.Fatal("the kernel was asked")
		return 0, nil
	}
	for _, peer := range []net.IP{nil, net.IPv4zero, net.IPv6unspecified, net.IP{1, 2}} {
		if _, err := r.Reset(context.Background(), peer); err == nil {
			t.Errorf("Reset(%v) succeeded", peer)
		}
	}
}
