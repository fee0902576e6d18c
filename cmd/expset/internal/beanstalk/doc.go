// Package beanstalk is a server speaking beanstalkd 1.12's protocol whose
// jobs live in Redis: the front of "expset beanstalkd".
//
// A Server answers clients; a Store holds the queue (see Store for the keys).
// Every command that changes a job is one Lua script on the tube's keys,
// which share a hash tag, so it runs whole on one Redis or Cluster node and
// reads Redis's clock: a time to run ends, and a delayed job becomes ready,
// by Redis's time, whichever front looks. A reserved job carries the token of
// the connection that holds it; only that connection may delete, release,
// bury or touch it, and when its time to run ends the next script on its
// tube puts it back ready. So a front that dies loses nothing: its clients'
// jobs come back when their time to run ends.
//
// Job IDs come from one counter (INCR) with the map from job ID to tube in
// a hash beside it; a put is one script on a single Redis server, and two on
// a cluster (the ID on the counter's slot, then the job on its tube's),
// a command by ID looks the tube up first (unless the connection holds the
// job). A waiting reserve wakes on a pub/sub message naming the tube, or when
// the tube next changes by itself (a delayed job due, a time to run ending),
// or after Config.Poll at the latest.
package beanstalk
