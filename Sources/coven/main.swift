import CovenKit
import Foundation

// A reader that goes away (`coven cat | head`) must not kill us with SIGPIPE mid-write of state.
signal(SIGPIPE, SIG_IGN)

let exitStatus = CLI.main(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
exit(exitStatus)
