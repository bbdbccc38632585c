// Package record is the codec of a job's key space in etcd: the values the
// sidecars, the leader and the status view write and read, their keys, and
// the one vocabulary of member states. It imports only the standard
// library, so every reader of the key space (the coordinator, the status
// view, tools) and the trainer API's wire types share one definition.
//
// Key space, one prefix per job (Prefix): /ringside/<namespace>/<job>/
//
//	members/<id>   each member, on its session lease: MemberInfo (DecodeMember)
//	election/...   the leader campaign (etcd's concurrency.Election)
//	generation     the leader only, permanent: Generation (DecodeGeneration)
//	status/<id>    each member, throttled, on its lease: Status (DecodeStatus)
//	crashes/<id>   each member, its trainer's newest crash, on its lease: Crash (DecodeCrash)
//	drains         each draining member, permanent: the newest drain durations (DecodeDrains)
//
// A decoder checks what the key space promises (a member's id matches its
// key, a generation's ranks are contiguous), so a reader can report a
// malformed value and go on without it.
package record
