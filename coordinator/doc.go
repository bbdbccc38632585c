// Package coordinator keeps a training job's ring membership in etcd v3 and
// decides its generations: which members form the all-reduce group, in what
// ring order, and with which ranks.
//
// Every member registers members/<id> on its own session lease and campaigns
// in an etcd election. The elected leader watches members/, batches joins for
// a settle window, commits departures at once, and writes each generation in
// one Txn fenced by its election key's CreateRevision and the previous
// generation's ModRevision, so a deposed leader can never commit. Members
// learn generations through one shared watch per Job.
//
// Key space, one prefix per job: /ringside/<namespace>/<job>/
//
//	members/<id>   each member, on its session lease (record.MemberInfo)
//	election/      the leader campaign (concurrency.Election)
//	generation     the leader only, permanent (record.Generation)
//	status/<id>    each member, on its session lease (record.Status)
//
// The values, their codec and the member states are defined once, in
// package record, which the status view and the trainer API share.
//
// The package has no Kubernetes dependency.
package coordinator
