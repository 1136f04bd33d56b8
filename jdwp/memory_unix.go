//go:build unix

package jdwp

import "syscall"

// allocMemory maps n bytes of zeroed anonymous memory, outside the Go
// heap, in huge pages if huge and the system has them (n is then a
// multiple of hugePage); ok is false if the system refuses.
func allocMemory(n int, huge bool) (p []byte, ok bool) {
	p, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, false
	}
	if huge {
		adviseHuge(p)
	}
	return p, true
}

// freeMemory unmaps memory from allocMemory. Nothing may refer to it any
// more: a read from it after this faults.
func freeMemory(p []byte) {
	// Munmap fails only for a slice Mmap did not return, which
	// Buffers never passes: nothing to do about it here but keep going.
	_ = syscall.Munmap(p)
}
