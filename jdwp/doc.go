// Package jdwp frames Java Debug Wire Protocol packets on a byte stream.
//
// It implements the transport half of JDWP as the project uses it (see
// docs/protocol.md at the repository root, section 4): the 14-byte handshake, the 11-byte
// packet header, request ids that cannot collide with ids the VM picks, reply
// matching by id, and delivery of packets the VM sends on its own. It works over
// any io.ReadWriteCloser and knows nothing of adb, DDM chunks, logging or
// metrics.
//
// A Conn has one reader goroutine. Each request waits for its reply, its
// context, or the end of the connection, whichever comes first, and removes
// itself when it gives up. Every packet is written with a single Write call, so
// a peer never sees half a packet followed by another writer's bytes.
package jdwp
