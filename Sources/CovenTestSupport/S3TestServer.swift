import CovenKit
import Foundation

// MARK: - Locating the repository and the shared tools

/// Paths tests need: the repository root and the shared S3 tools beside it.
public enum TestPaths {
    /// The repository root (the folder holding Package.swift), found from this source file.
    public static func repositoryRoot(file: String = #filePath) -> String {
        var url = URL(fileURLWithPath: file).deletingLastPathComponent()
        while url.path != "/" {
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) {
                return url.path
            }
            url.deleteLastPathComponent()
        }
        return FileManager.default.currentDirectoryPath
    }

    /// The shared folder: `COVEN_SHARED_DIR`, else `<repo>/../shared` when it holds the S3
    /// tools, else the copy in `<repo>/Tests/shared` (Tests/shared/README.md).
    public static func sharedDirectory() -> String {
        if let custom = ProcessInfo.processInfo.environment["COVEN_SHARED_DIR"], !custom.isEmpty {
            return custom
        }
        let beside = URL(fileURLWithPath: repositoryRoot()).deletingLastPathComponent().appendingPathComponent("shared").path
        if FileManager.default.isExecutableFile(atPath: beside + "/s3/start-s3-server") { return beside }
        return repositoryRoot() + "/Tests/shared"
    }

    /// A new empty temporary folder.
    public static func temporaryDirectory(_ label: String) throws -> String {
        let path = NSTemporaryDirectory() + "coven-\(label)-" + UUID().uuidString.lowercased().prefix(8)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}

// MARK: - A loopback S3 server

/// A loopback S3 server for integration tests: `shared/s3/start-s3-server` (moto behind a
/// SigV4-checking launcher) or `shared/s3/start-seaweedfs-server` (SeaweedFS `weed mini`).
///
/// ``start(_:)`` launches one on a free port and parses the `export` lines it prints; ``stop()``
/// (or deinit) stops it with `stop-s3-server`. A watchdog shell stops it too if the test process
/// dies first. A server someone started already is reused when named on purpose:
/// `COVEN_TEST_MOTO_ENDPOINT_URL` (with `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`) for moto,
/// `COVEN_TEST_SEAWEEDFS_ENDPOINT_URL` for SeaweedFS. Never `AWS_ENDPOINT_URL` itself: a test
/// that exports a server's variables into its own process would make a later class reuse a
/// server that has stopped.
public final class S3TestServer {
    /// Which server.
    public enum Kind: String, Sendable {
        /// moto 5.2.1 behind moto_s3_launcher.py (`start-s3-server`).
        case moto
        /// SeaweedFS 4.48 (`start-seaweedfs-server`).
        case seaweedfs

        var script: String { self == .moto ? "start-s3-server" : "start-seaweedfs-server" }
    }

    /// Which server this is.
    public let kind: Kind
    /// `http://127.0.0.1:PORT`.
    public let endpoint: String
    /// The access key the server accepts.
    public let accessKeyID: String
    /// The secret the server accepts.
    public let secretAccessKey: String
    /// The region of its credential scope.
    public let region: String
    /// The server's process id, when this object started it.
    public let pid: Int32?
    private let workDirectory: String?
    private var watchdog: Spawn.Child?
    private var stopped = false

    /// The `AWS_*` variables a client needs.
    public var environment: [String: String] {
        ["AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": accessKeyID, "AWS_SECRET_ACCESS_KEY": secretAccessKey, "AWS_REGION": region]
    }

    private init(kind: Kind, endpoint: String, accessKeyID: String, secretAccessKey: String, region: String, pid: Int32?, workDirectory: String?) {
        self.kind = kind
        self.endpoint = endpoint
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.region = region
        self.pid = pid
        self.workDirectory = workDirectory
    }

    deinit { stop() }

    /// Starts a server (or reuses the one named by the environment, see above).
    ///
    /// The first start may install moto or SeaweedFS with pip (about 30 s).
    ///
    /// - Throws: ``CovenError`` `.internal` with the script's stderr when it fails.
    public static func start(_ kind: Kind) throws -> S3TestServer {
        let environment = ProcessInfo.processInfo.environment
        let reuseVariable = kind == .moto ? "COVEN_TEST_MOTO_ENDPOINT_URL" : "COVEN_TEST_SEAWEEDFS_ENDPOINT_URL"
        if let endpoint = environment[reuseVariable], !endpoint.isEmpty {
            return S3TestServer(
                kind: kind, endpoint: endpoint, accessKeyID: environment["AWS_ACCESS_KEY_ID"] ?? "s3test",
                secretAccessKey: environment["AWS_SECRET_ACCESS_KEY"] ?? "s3test-secret-key",
                region: environment["AWS_REGION"] ?? "us-east-1", pid: nil, workDirectory: nil)
        }

        let tools = TestPaths.sharedDirectory() + "/s3"
        let script = tools + "/" + kind.script
        guard FileManager.default.isExecutableFile(atPath: script) else {
            throw CovenError(.internal, "cannot find '\(script)'", hint: "set COVEN_SHARED_DIR to the folder holding s3/")
        }
        let work = try TestPaths.temporaryDirectory("s3-\(kind.rawValue)")
        let pidFile = work + "/server.pid"
        let stdoutPath = work + "/start.out"
        let stderrPath = work + "/start.err"
        _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)

        var childEnvironment = environment
        // The child must not reuse a server the Makefile started for the other kind.
        childEnvironment.removeValue(forKey: "AWS_ENDPOINT_URL")
        let result: (status: Int32, timedOut: Bool)
        do {
            result = try Spawn.run(
                script, ["0", pidFile], environment: childEnvironment, directory: work, stdout: stdoutPath,
                stderr: stderrPath, timeout: 300)
        } catch {
            throw CovenError(.internal, "cannot run '\(script)'", cause: String(describing: error))
        }
        let output = (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? ""
        let errors = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
        guard result.status == 0 else {
            throw CovenError(
                .internal, "\(kind.script) failed with status \(result.status)\(result.timedOut ? " (timed out)" : "")",
                cause: String(errors.suffix(2000)))
        }

        var values: [String: String] = [:]
        for line in output.split(separator: "\n") where line.hasPrefix("export ") {
            for assignment in line.dropFirst("export ".count).split(separator: " ") {
                let pair = assignment.split(separator: "=", maxSplits: 1).map(String.init)
                if pair.count == 2 { values[pair[0]] = pair[1] }
            }
        }
        guard let endpoint = values["AWS_ENDPOINT_URL"], let pidText = values["S3_SERVER_PID"], let pid = Int32(pidText) else {
            throw CovenError(.internal, "\(kind.script) printed no endpoint", cause: output + errors.suffix(1000))
        }
        let server = S3TestServer(
            kind: kind, endpoint: endpoint, accessKeyID: values["AWS_ACCESS_KEY_ID"] ?? "s3test",
            secretAccessKey: values["AWS_SECRET_ACCESS_KEY"] ?? "s3test-secret-key",
            region: values["AWS_REGION"] ?? "us-east-1", pid: pid, workDirectory: work)
        server.startWatchdog(stopScript: tools + "/stop-s3-server", pidFile: pidFile)
        return server
    }

    /// Stops the server when the test process dies without calling ``stop()``.
    private func startWatchdog(stopScript: String, pidFile: String) {
        watchdog = try? Spawn.start(
            "/bin/sh",
            [
                "-c", "while kill -0 \"$1\" 2>/dev/null; do sleep 2; done; \"$2\" \"$3\"", "watchdog",
                String(ProcessInfo.processInfo.processIdentifier), stopScript, pidFile,
            ])
    }

    /// Stops the server this object started (a reused one is left running) and removes its
    /// data. Safe to call twice.
    public func stop() {
        guard !stopped else { return }
        stopped = true
        if let watchdog { Spawn.stop(watchdog, grace: 1) }
        guard pid != nil, let workDirectory else { return }
        _ = try? Spawn.run(TestPaths.sharedDirectory() + "/s3/stop-s3-server", [workDirectory + "/server.pid"], timeout: 30)
        try? FileManager.default.removeItem(atPath: workDirectory)
    }

    /// An `s3://` location on this server (path-style, its endpoint in the URL).
    public func location(bucket: String, prefix: String = "") -> StorageLocation {
        .s3(bucket: bucket, prefix: prefix, endpoint: endpoint, region: region, pathStyle: true)
    }

    /// A provider for `bucket/prefix` with this server's credentials.
    ///
    /// - Parameters:
    ///   - endpoint: another endpoint to send requests to (a fault proxy in front of this server).
    ///   - secretAccessKey: a different secret (to test refusals).
    /// - Throws: what ``S3Storage/init(location:options:environment:)`` throws.
    public func storage(
        bucket: String, prefix: String = "", options: StorageOptions = StorageOptions(environment: [:]),
        endpoint: String? = nil, secretAccessKey: String? = nil
    ) throws -> S3Storage {
        var environment = self.environment
        if let secretAccessKey { environment["AWS_SECRET_ACCESS_KEY"] = secretAccessKey }
        let location = StorageLocation.s3(
            bucket: bucket, prefix: prefix, endpoint: endpoint ?? self.endpoint, region: region, pathStyle: true)
        return try S3Storage(location: location, options: options, environment: environment)
    }

    /// Creates a bucket (no error when it exists).
    ///
    /// - Throws: ``CovenError`` `.storage` when the server refuses.
    public func makeBucket(_ bucket: String) throws {
        try storage(bucket: bucket).createBucket()
    }
}
