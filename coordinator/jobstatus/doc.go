// Package jobstatus reads a job's state from etcd in one request and shows
// it to people: the committed generation, its members in ring order, what
// each member's sidecar last reported, and the standby members.
//
// Read builds a Snapshot from one linearizable Get of the job's prefix
// (/ringside/<namespace>/<job>/), so every field comes from the same etcd
// revision. It never fails on what it finds there: a malformed value is
// skipped and named in Snapshot.Warnings, because a status view is what an
// operator opens when something is already wrong.
//
// Render prints a Snapshot as a compact table; RenderLive redraws it in
// place on a terminal. `ringside status` and the demo both use them.
// Printer picks among JSON lines, the live view and the changed snapshots
// for a view that refreshes, and Follow refreshes it: on a ticker, and at
// once when the job commits a generation.
package jobstatus
