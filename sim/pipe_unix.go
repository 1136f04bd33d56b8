//go:build unix

package sim

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// streamPair returns the two ends of a service stream: a Unix socket pair,
// as between adbd and an app's VM on a device, with the kernel's buffering.
func streamPair() (client, server net.Conn, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: socketpair: %w", err)
	}
	conn := func(fd int, name string) (net.Conn, error) {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close() // FileConn dups the descriptor
		return net.FileConn(f)
	}
	if client, err = conn(fds[0], "sim-client"); err != nil {
		syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("sim: socketpair: %w", err)
	}
	if server, err = conn(fds[1], "sim-service"); err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("sim: socketpair: %w", err)
	}
	return client, server, nil
}
