package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Crash is a member's report that its trainer exited on its own in
// restart mode, stored under crashes/<id> (a member's newest report
// replaces its previous one). A failure is stored on the member's lease:
// the leader reads it to decide whether the job restarts, and whether the
// crash counts against the job's restart budget (a peer's death or drain
// just before makes it the peer's), or stops the job. A success
// (Finished) outlives the lease, as a completed pod goes away: the job is
// finishing, and its generation no longer changes (see
// coordinator/crash.go).
type Crash struct {
	// Generation is the generation the trainer ran in.
	Generation int64 `json:"generation"`
	// ExitCode is the trainer's exit code, 128+N when signal N ended it
	// (Signal then names it); 0 when the reporter did not say.
	ExitCode int    `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// RanS is how long the trainer ran, in seconds.
	RanS float64 `json:"ran_s"`
	// FirstStep: the trainer reached its first training step (it ran
	// longer than exec's --first-step-time, or its sidecar heard a
	// heartbeat from it).
	FirstStep bool `json:"first_step,omitempty"`
	// Stderr holds the last lines the trainer wrote to its standard
	// error, oldest first.
	Stderr []string `json:"stderr,omitempty"`
	// Error is what a reporter without the fields above said.
	Error string `json:"error,omitempty"`
	// MaxRestarts is the job's restart budget and CrashLoop the number of
	// generations in a row whose trainers all fail before their first
	// step that stops the job (0: never), as the reporter was given them.
	MaxRestarts int `json:"max_restarts"`
	CrashLoop   int `json:"crash_loop"`
	// Time is when the sidecar recorded it.
	Time time.Time `json:"time"`
	// Finished: the command exited 0, the trainer's work is done.
	Finished bool `json:"finished,omitempty"`
}

// Bounds of a Crash.
const (
	// MaxCrashLines and MaxCrashLineLen bound the stderr lines a crash
	// keeps: a Python traceback through a library (torch.load) is about
	// 15 lines, and 20 of 512 bytes keep a crash record of every member of
	// a large job small.
	MaxCrashLines   = 20
	MaxCrashLineLen = 512
	// MaxRestartBudget bounds MaxRestarts and CrashLoop.
	MaxRestartBudget = 1_000_000
	// maxRanS bounds a run time: ten years, in seconds, converts to a
	// time.Duration without overflow.
	maxRanS = 10 * 365 * 24 * 3600
)

// CrashKey returns the key, relative to the job's Prefix, of member id's
// crash.
func CrashKey(id string) string { return CrashesDir + id }

// DecodeCrash decodes and checks the value of a crashes/<id> key (given
// relative to the job's Prefix, or absolute) and returns the member's id
// with it.
func DecodeCrash(key string, value []byte) (id string, c Crash, err error) {
	rel := key
	if i := indexJobKey(key); i >= 0 {
		rel = key[i:]
	}
	id, ok := strings.CutPrefix(rel, CrashesDir)
	if !ok || ValidateID(id) != nil {
		return "", Crash{}, fmt.Errorf("malformed crash key %q: want %s<id>", key, CrashesDir)
	}
	if err := json.Unmarshal(value, &c); err != nil {
		return "", Crash{}, fmt.Errorf("malformed crash of %s: %w", id, err)
	}
	if err := c.Validate(); err != nil {
		return "", Crash{}, fmt.Errorf("malformed crash of %s: %w", id, err)
	}
	return id, c, nil
}

// Validate reports every field of c out of its bounds.
func (c Crash) Validate() error {
	var errs []error
	if c.Generation < 1 || c.Generation > MaxGeneration {
		errs = append(errs, fmt.Errorf("generation %d is out of range", c.Generation))
	}
	if c.ExitCode < 0 || c.ExitCode > 255 {
		errs = append(errs, fmt.Errorf("exit code %d is not in 0-255", c.ExitCode))
	}
	if c.Finished && (c.ExitCode != 0 || c.Signal != "") {
		errs = append(errs, fmt.Errorf("a finished trainer exits 0, not %d %s", c.ExitCode, c.Signal))
	}
	if c.Signal != "" && !signalName.MatchString(c.Signal) {
		errs = append(errs, fmt.Errorf("signal %q is not a signal's name (SIGKILL)", c.Signal))
	}
	if !(c.RanS >= 0 && c.RanS <= maxRanS) {
		errs = append(errs, fmt.Errorf("ran_s %v is not a run time in seconds (0 to %g)", c.RanS, float64(maxRanS)))
	}
	if len(c.Stderr) > MaxCrashLines {
		errs = append(errs, fmt.Errorf("%d stderr lines, more than %d", len(c.Stderr), MaxCrashLines))
	}
	for _, l := range c.Stderr {
		if err := validText("a stderr line", l, MaxCrashLineLen); err != nil {
			errs = append(errs, err)
			break
		}
	}
	if err := validText("error", c.Error, MaxTextLen); err != nil {
		errs = append(errs, err)
	}
	if c.MaxRestarts < 0 || c.MaxRestarts > MaxRestartBudget || c.CrashLoop < 0 || c.CrashLoop > MaxRestartBudget {
		errs = append(errs, fmt.Errorf("max_restarts %d or crash_loop %d is not in 0-%d", c.MaxRestarts, c.CrashLoop, MaxRestartBudget))
	}
	return errors.Join(errs...)
}

var signalName = regexp.MustCompile(`^SIG[A-Z0-9+-]{1,13}$`)

// Exits says how the trainer ended, for people: "exits 1", "is killed
// by SIGKILL", or "fails" when the reporter did not say; plural: as
// several trainers ended ("exit 1").
func (c Crash) Exits(plural bool) string {
	switch {
	case c.Signal != "" && plural:
		return "are killed by " + c.Signal
	case c.Signal != "":
		return "is killed by " + c.Signal
	case c.ExitCode != 0 && plural:
		return fmt.Sprintf("exit %d", c.ExitCode)
	case c.ExitCode != 0:
		return fmt.Sprintf("exits %d", c.ExitCode)
	case plural:
		return "fail"
	}
	return "fails"
}

// Cause is the crash's cause in one line, for people: the last line of
// its stderr (a Python exception's type and message), with the last frame
// of a Python traceback before it in the script's own code (not in an
// installed library) and that frame's line, as in
// "EOFError: Ran out of input, at train.py:31: snapshot = torch.load(path)";
// Error when it has no stderr; "" when it has neither.
func (c Crash) Cause() string {
	lines := c.Stderr
	last := -1
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) != "" {
			last = i
			break
		}
	}
	if last < 0 {
		return strings.TrimSpace(c.Error)
	}
	cause := strings.TrimSpace(lines[last])
	for i := last - 1; i >= 0; i-- {
		m := pythonFrame.FindStringSubmatch(lines[i])
		if m == nil || libraryPath.MatchString(m[1]) {
			continue
		}
		cause += fmt.Sprintf(", at %s:%s", path.Base(m[1]), m[2])
		if i+1 < last && !pythonFrame.MatchString(lines[i+1]) {
			if code := strings.TrimSpace(lines[i+1]); code != "" && !strings.HasPrefix(code, "^") {
				cause += ": " + code
			}
		}
		break
	}
	return cause
}

var (
	// pythonFrame is a frame of a Python traceback.
	pythonFrame = regexp.MustCompile(`^\s*File "([^"]+)", line (\d+), in `)
	// libraryPath is where installed Python code lives.
	libraryPath = regexp.MustCompile(`/(site|dist)-packages/|/lib/python[0-9.]*/|^<frozen `)
)

// TrimText bounds s for a record: valid UTF-8, at most limit bytes (a
// longer s ends in "…").
func TrimText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	s = s[:limit-len("…")]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
