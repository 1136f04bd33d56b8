package supervisor

import "github.com/alloctrack/alloctrack/alloctrack/pertest"

// Attributor is what the test follower asks of a pertest.Attributor.
type Attributor = attributor

// SetNewAttributor replaces how the daemon makes a process run's
// attributor; call it before Run.
func (d *Daemon) SetNewAttributor(fn func(pertest.Config) Attributor) { d.newAttributor = fn }
