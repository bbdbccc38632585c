// Package bench measures ringside against its targets. Each benchmark
// starts what it needs (a real embedded etcd, real members) on loopback and
// returns one result that the CLI prints as a JSON line.
package bench
