import CLinux
import CovenKit
import Foundation

// A closed standard stream (`coven stage - <&-`) would hand its number to the next file opened
// (the database), and `stage -` would read that: every one of 0, 1 and 2 is something, if only
// /dev/null.
// A closed stdout is remembered: writing data to it fails the command (io).
let stdoutClosed = fcntl(1, F_GETFD) == -1
for descriptor in Int32(0)...2 where fcntl(descriptor, F_GETFD) == -1 {
    _ = open("/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY)
}

// Two malloc arenas, not one per thread: the read path's threads (make-device-only downloads eight
// files at once, each with its prefetch) each kept their own freed 1 MiB buffers, 13 MiB more at
// the peak for 200 files and no faster (measured). MALLOC_ARENA_MAX still overrides it.
if getenv("MALLOC_ARENA_MAX") == nil { _ = coven_limit_malloc_arenas(2) }
// Buffers of 1 MiB and more from mmap, given back when freed: a sync of a library holds a change
// of several MiB at a time, and glibc otherwise keeps the heap pages of each freed one (a pull of
// 100,000 file records: 71 -> 65 MiB peak, measured). MALLOC_MMAP_THRESHOLD_ still overrides it.
if getenv("MALLOC_MMAP_THRESHOLD_") == nil { _ = coven_fix_malloc_mmap_threshold(1 << 20) }

// A reader that goes away (`coven cat | head`) must not kill us with SIGPIPE mid-write of state.
signal(SIGPIPE, SIG_IGN)

// Arguments as the OS gives them: a name that is not UTF-8 (a Latin-1 'Caf\xE9.flac') keeps its
// bytes (CommandLine.arguments would replace them).
var words: [String] = []
for index in 1..<Int(CommandLine.argc) {
    guard let argument = CommandLine.unsafeArgv[index] else { continue }
    let length = strlen(argument)
    let bytes = [UInt8](UnsafeRawBufferPointer(start: argument, count: length))
    words.append(PathText.string(fromOSBytes: bytes))
}
let exitStatus = CLI.main(words, environment: ProcessInfo.processInfo.environment, stdoutClosed: stdoutClosed)
exit(exitStatus)
