package launch

import (
	"io"
	"sync"

	"github.com/ringside/ringside/coordinator/record"
)

// lineTail passes what a trainer writes on its stderr through unchanged
// and keeps its last lines, for the report of its crash: a Python
// traceback ends there with the exception that ended the process.
type lineTail struct {
	out io.Writer

	mu   sync.Mutex
	last []string // complete lines, oldest first, at most record.MaxCrashLines
	cur  []byte   // the line being written
	cr   bool     // cur ended in '\r': a progress bar redraws it unless '\n' follows
}

func (t *lineTail) Write(b []byte) (int, error) {
	// The trainer's output is the user's: a stderr that fails (a closed
	// terminal) must not end the trainer, which writing to it directly
	// would not have either.
	t.out.Write(b) //nolint:errcheck // see above
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range b {
		switch {
		case c == '\n':
			t.push()
		case c == '\r':
			t.cr = true
		default:
			if t.cr {
				t.cur, t.cr = t.cur[:0], false
			}
			if len(t.cur) <= record.MaxCrashLineLen {
				t.cur = append(t.cur, c)
			}
		}
	}
	return len(b), nil
}

// push ends the current line.
func (t *lineTail) push() {
	if len(t.last) == record.MaxCrashLines {
		t.last = append(t.last[:0], t.last[1:]...)
	}
	t.last = append(t.last, record.TrimText(string(t.cur), record.MaxCrashLineLen))
	t.cur, t.cr = t.cur[:0], false
}

// lines returns the last lines, the unfinished one too.
func (t *lineTail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.last...)
	if len(t.cur) > 0 {
		out = append(out, record.TrimText(string(t.cur), record.MaxCrashLineLen))
	}
	if len(out) > record.MaxCrashLines {
		out = out[len(out)-record.MaxCrashLines:]
	}
	return out
}
