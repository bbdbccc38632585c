// Package loopback hands out blocks of loopback addresses to the local
// jobs and test harnesses of one machine, so that jobs running at the same
// time (test packages run in parallel) never share an address: every worker
// listens on fixed ports of its own address, as a pod does on its IP.
//
// A block is 127.B.0.0/16 for B in 1-254 (127.0.0.0/16 is left to
// everything else); it is held with an exclusive flock on a file in the
// temporary directory, which the kernel drops when the process exits, so
// a crashed holder never leaks its block.
package loopback

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Block is a block of loopback addresses held by this process.
type Block struct {
	b int
	f *os.File
}

// Acquire takes the first free block.
func Acquire() (*Block, error) {
	for b := 1; b <= 254; b++ {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("ringside-loopback-%d.lock", b))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("loopback block: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return &Block{b: b, f: f}, nil
		}
		f.Close()
	}
	return nil, errors.New("loopback block: all 254 are held by other processes")
}

// Addr returns the block's n-th address (n from 0 to 63,999).
func (b *Block) Addr(n int) string {
	return fmt.Sprintf("127.%d.%d.%d", b.b, n/250, n%250+2)
}

// MasterPort is the first of 16 ports the block's job gives rank 0's store
// (the sidecar's --master-port): torch's store listens on every address,
// not on its worker's own, so two jobs on the machine must not share
// these. 20016-24079, below the kernel's ephemeral ports.
func (b *Block) MasterPort() int { return 20000 + 16*b.b }

// Number is the block's B, 1-254: unique among the blocks held on this
// machine, so it also names other per-job resources (a subnet).
func (b *Block) Number() int { return b.b }

// Release gives the block back.
func (b *Block) Release() { b.f.Close() }
