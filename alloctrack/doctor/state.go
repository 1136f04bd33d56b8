package doctor

import (
	"fmt"
	"strings"
)

// StateReason says why doctor cannot ask a device in adb state state
// ("device" is online: ""), and what the user can do.
func StateReason(state string) string {
	switch {
	case state == "device" || state == "":
		return ""
	case state == "unauthorized":
		return "adb state unauthorized: this computer's key is not accepted; accept the \"Allow USB debugging?\" prompt on the phone (unplug and plug it in again if none shows)"
	case state == "offline":
		return "adb state offline: adb sees the device but cannot talk to it; unplug and plug it in again, or restart the adb server (adb kill-server)"
	case strings.HasPrefix(state, "no permissions"):
		return "adb state " + state + ": the adb server may not open the USB device; on Linux add a udev rule for it (see the state's link), then plug it in again"
	case state == "authorizing" || state == "connecting":
		return "adb state " + state + ": the device is still connecting; run doctor again in a moment"
	}
	return fmt.Sprintf("adb state %s: only a device in state \"device\" can be asked", state)
}
