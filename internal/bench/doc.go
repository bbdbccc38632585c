// Package bench measures ringside against its targets. Each benchmark
// starts what it needs (a real embedded etcd, real members) on loopback and
// returns one result that WriteResult prints as a JSON line, or as its
// Summary for people.
package bench
