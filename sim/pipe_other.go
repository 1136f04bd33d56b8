//go:build !unix

package sim

import "net"

// streamPair returns the two ends of a service stream; without Unix
// sockets, an in-memory pipe.
func streamPair() (client, server net.Conn, err error) {
	c, s := net.Pipe()
	return c, s, nil
}
