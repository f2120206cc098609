import Foundation

/// Where the repository and the built `coven` are, and how the tests run programs.
enum Repository {
    /// The repository's root (this file is `Tests/CovenCLITests/Support/Processes.swift`).
    static let root: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// A path inside the repository.
    static func path(_ relative: String) -> String { root.appendingPathComponent(relative).path }

    /// The `coven` binary under test: `$COVEN_BIN`, else the one beside the test bundle (the
    /// configuration `swift test` built), else `.build/debug/coven`.
    static func covenBinary() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["COVEN_BIN"], !path.isEmpty { return path }
        var candidates: [String] = []
        if let test = CommandLine.arguments.first {
            // …/debug/covenPackageTests.xctest: the products folder is the bundle's.
            candidates.append(URL(fileURLWithPath: test).deletingLastPathComponent().appendingPathComponent("coven").path)
        }
        candidates.append(path(".build/debug/coven"))
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        throw TestError("no coven binary at \(candidates.joined(separator: " or ")): run 'swift build' or set COVEN_BIN")
    }
}

/// A failure of the test machinery itself (not of coven).
struct TestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// What a finished program left: its status and its raw output.
struct ProcessResult {
    var status: Int32
    var stdout: Data
    var stderr: Data
    /// Whether it was killed for running past its time.
    var timedOut = false

    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    var stderrText: String { String(decoding: stderr, as: UTF8.self) }
}

/// Runs programs with their output in files (no pipe can fill up and block the child).
enum Processes {
    /// Runs `executable` with `arguments`, waiting at most `timeout` seconds.
    ///
    /// - Parameters:
    ///   - environment: the child's whole environment (nothing is inherited).
    ///   - directory: its working directory.
    ///   - stdin: a file for its standard input; `/dev/null` when nil.
    static func run(
        _ executable: String, _ arguments: [String], environment: [String: String],
        directory: String, stdin: String? = nil, timeout: TimeInterval = 120
    ) throws -> ProcessResult {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("coven-run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let outURL = scratch.appendingPathComponent("stdout")
        let errURL = scratch.appendingPathComponent("stderr")
        guard FileManager.default.createFile(atPath: outURL.path, contents: nil),
              FileManager.default.createFile(atPath: errURL.path, contents: nil)
        else { throw TestError("cannot create the output files in \(scratch.path)") }
        let out = try FileHandle(forWritingTo: outURL)
        defer { try? out.close() }
        let err = try FileHandle(forWritingTo: errURL)
        defer { try? err.close() }
        guard let input = FileHandle(forReadingAtPath: stdin ?? "/dev/null") else {
            throw TestError("cannot open '\(stdin ?? "/dev/null")' for stdin")
        }
        defer { try? input.close() }

        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.standardInput = input
        process.standardOutput = out
        process.standardError = err
        let done = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in done.signal() }
        try process.run()
        var timedOut = false
        if done.wait(timeout: .now() + timeout) == .timedOut {
            timedOut = true
            kill(process.processIdentifier, SIGKILL)
            done.wait()
        }
        return ProcessResult(
            status: process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus,
            stdout: try Data(contentsOf: outURL), stderr: try Data(contentsOf: errURL), timedOut: timedOut)
    }

    /// The absolute path of `program` on `path` (a `PATH` value), or nil.
    static func which(_ program: String, path: String) -> String? {
        if program.contains("/") { return FileManager.default.isExecutableFile(atPath: program) ? program : nil }
        for folder in path.split(separator: ":") {
            let candidate = "\(folder)/\(program)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    /// Runs the built coven in `directory` with the golden tests' fixed environment.
    static func coven(_ arguments: [String], directory: String? = nil) throws -> ProcessResult {
        let binary = try Repository.covenBinary()
        let work = directory ?? FileManager.default.temporaryDirectory.path
        return try run(binary, arguments, environment: GoldenEnvironment.make(work: work, binary: binary),
                       directory: work)
    }
}
