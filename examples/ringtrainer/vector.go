package main

// The vector every rank contributes is a pure function of (step, rank,
// index), so each rank can compute the exact all-reduced sum by itself.
// The values look random: a chunk reduced twice, skipped, taken from
// another step or placed at the wrong offset changes the sum. Sums wrap
// around in int64, which is exact too: wrapping addition is associative
// and commutative, so the ring's order of additions does not matter.

// reduceOp combines a received element into the local one.
type reduceOp func(local, received int64) int64

func opSum(a, b int64) int64 { return a + b }
func opMax(a, b int64) int64 { return max(a, b) }

// fill writes rank's contribution to step into v.
func fill(v []int64, step int64, rank int) {
	for i := range v {
		v[i] = contribution(step, rank, i)
	}
}

// contribution is splitmix64's finaliser over (step, rank, index).
func contribution(step int64, rank, i int) int64 {
	x := uint64(step)*0x9E3779B97F4A7C15 ^ uint64(rank)<<32 ^ uint64(i)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return int64(x)
}

// expected is element i of step's sum over world ranks.
func expected(step int64, world, i int) int64 {
	var sum int64
	for r := range world {
		sum += contribution(step, r, i)
	}
	return sum
}

// verify returns the first element of v that is not the sum over world
// ranks for step, or -1.
func verify(v []int64, step int64, world int) int {
	for i, x := range v {
		if x != expected(step, world, i) {
			return i
		}
	}
	return -1
}
