// Package doctor decides, from facts gathered on a device, which backend
// alloctrack would use for an app (DDM, heapprofd, heap dumps or none)
// and, where none, the exact reason and what the user can change. It does
// no I/O: the caller (cmd/alloctrack doctor) gathers the facts through
// adb. The rules and their sources are in docs/doctor.md.
package doctor
