package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/ringside/ringside/sidecar/quantile"
)

// statsDir is where the PyTorch trainers of a job in dir write what their
// commits and syncs cost (train.py --stats-dir): one JSON line per group
// formed, per trainer process.
func statsDir(dir string) string { return filepath.Join(dir, "trainer-stats") }

// formation is one line of train.py's --stats-dir files.
type formation struct {
	Member     string  `json:"member"`
	Generation int64   `json:"generation"`
	SyncBytes  int64   `json:"sync_bytes"` // the group's total, the same on every rank
	Commits    int64   `json:"commits"`    // this process's, so far
	CommitS    float64 `json:"commit_s"`
}

// trainerCosts sums the formations' lines under dir: the mean time of one
// commit (each process's newest line counts: its totals so far) and, per
// re-form after the first generation, the bytes its sync moved.
type trainerCosts struct {
	CommitMs    float64
	SyncBytes   []float64
	Generations int
}

func readTrainerCosts(dir string) (trainerCosts, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return trainerCosts{}, err
	}
	var commits int64
	var commitS float64
	perGen := map[int64]int64{}
	for _, f := range files {
		lines, err := readFormations(f)
		if err != nil {
			return trainerCosts{}, err
		}
		if len(lines) == 0 {
			continue
		}
		last := lines[len(lines)-1]
		commits += last.Commits
		commitS += last.CommitS
		for _, l := range lines {
			perGen[l.Generation] = max(perGen[l.Generation], l.SyncBytes)
		}
	}
	var c trainerCosts
	if commits > 0 {
		c.CommitMs = commitS / float64(commits) * 1e3
	}
	gens := slices.Sorted(func(yield func(int64) bool) {
		for g := range perGen {
			if !yield(g) {
				return
			}
		}
	})
	c.Generations = len(gens)
	for _, g := range gens[min(1, len(gens)):] { // the first formation has nobody to sync
		c.SyncBytes = append(c.SyncBytes, float64(perGen[g]))
	}
	return c, nil
}

func readFormations(path string) ([]formation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []formation
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l formation
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l) // a line cut by a kill is skipped
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// syncBytesFigures returns the median and the largest sync of the re-forms.
func syncBytesFigures(c trainerCosts) (p50, largest int64) {
	if len(c.SyncBytes) == 0 {
		return 0, 0
	}
	p := quantile.Each(c.SyncBytes, 0.5, 1)
	return int64(p[0]), int64(p[1])
}
