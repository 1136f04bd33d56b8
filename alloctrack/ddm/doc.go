// Package ddm is the Android 4.4–11 backend: a Session speaks DDM over one
// process's JDWP connection, cycles the VM's allocation tracker (REAE,
// REAQ, REAL) in windows, and turns each report into a window of the model
// (WindowOfReport), with every allocation's thread kept for profiles. It
// knows nothing of adb, of the supervisor, or of metrics.
package ddm
