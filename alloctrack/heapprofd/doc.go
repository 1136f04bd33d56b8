// Package heapprofd is the Android 12+ backend: one perfetto session per
// device whose android.heapprofd data source samples the Java heap of the
// device's apps (Session), the clean-up of what an earlier run left
// (Clean), and the translation of each heapprofd dump into a sampled
// window of the model (WindowOfDump, EstimateValues), with the device
// time each covers (Session.OnDump, DumpTimes; docs/test-runs.md,
// "heapprofd: times and dumps"). It speaks to a
// device only through an ExecFunc (adb shell); it knows nothing of adb
// itself, of the supervisor, or of metrics.
package heapprofd
