import Foundation
import XCTest

/// Runs every case under Tests/golden/ against the built coven (the format is in
/// Tests/golden/README.md).
///
/// `RECORD_GOLDEN=1` rewrites the expected output of the cases in place and then fails, so a
/// recording run is never mistaken for a passing one. `GOLDEN=word` runs only the cases whose
/// file name contains the word; `GOLDEN_KEEP=1` keeps the folder of a failed case;
/// `COVEN_GOLDEN_TIMEOUT` is the seconds one step may run (120).
final class GoldenTests: XCTestCase {
    func testGoldenCases() throws {
        let environment = ProcessInfo.processInfo.environment
        let folder = Repository.path("Tests/golden")
        let filter = environment["GOLDEN"] ?? ""
        let cases = try FileManager.default.contentsOfDirectory(atPath: folder)
            .filter { $0.hasSuffix(".txt") && (filter.isEmpty || $0.contains(filter)) }
            .sorted()
            .map { folder + "/" + $0 }
        XCTAssertFalse(cases.isEmpty, "no golden cases in \(folder) matching '\(filter)'")
        let runner = GoldenRunner(
            binary: try Repository.covenBinary(),
            recording: environment["RECORD_GOLDEN"].map { !$0.isEmpty && $0 != "0" } ?? false,
            timeout: environment["COVEN_GOLDEN_TIMEOUT"].flatMap(TimeInterval.init) ?? 120,
            keepFailed: environment["GOLDEN_KEEP"] != nil)

        let outcomes = Self.runAll(cases, runner)
        var recorded: [String] = []
        for outcome in outcomes {
            for failure in outcome.failures {
                recordFailure(withDescription: failure.message, inFile: outcome.path, atLine: failure.line, expected: true)
            }
            if let skipped = outcome.skipped { print("golden: skipped \(Self.name(outcome.path)): \(skipped)") }
            if let text = outcome.recorded {
                try text.write(toFile: outcome.path, atomically: true, encoding: .utf8)
                recorded.append(Self.name(outcome.path))
            }
        }
        let failed = outcomes.filter { !$0.failures.isEmpty }.count
        print("golden: \(outcomes.count) case(s), \(failed) failed, \(outcomes.filter { $0.skipped != nil }.count) skipped")
        if runner.recording {
            XCTFail("RECORD_GOLDEN is set: rewrote \(recorded.count) case(s)\(recorded.isEmpty ? "" : " (\(recorded.joined(separator: ", ")))"); review them with 'git diff Tests/golden', then run the tests again without RECORD_GOLDEN")
        }
    }

    /// Runs the cases a few at a time (each is a handful of short processes).
    private static func runAll(_ cases: [String], _ runner: GoldenRunner) -> [GoldenRunner.Outcome] {
        let results = Results(count: cases.count)
        let width = max(1, min(4, ProcessInfo.processInfo.activeProcessorCount))
        let group = DispatchGroup()
        let slots = DispatchSemaphore(value: width)
        for (index, path) in cases.enumerated() {
            slots.wait()
            group.enter()
            DispatchQueue.global().async {
                results.set(index, runner.run(path))
                slots.signal()
                group.leave()
            }
        }
        group.wait()
        return results.all
    }

    private static func name(_ path: String) -> String { (path as NSString).lastPathComponent }
}

/// The outcomes, filled from several threads.
private final class Results: @unchecked Sendable {
    private let lock = NSLock()
    private var outcomes: [GoldenRunner.Outcome?]

    init(count: Int) { outcomes = Array(repeating: nil, count: count) }

    func set(_ index: Int, _ outcome: GoldenRunner.Outcome) {
        lock.lock()
        defer { lock.unlock() }
        outcomes[index] = outcome
    }

    var all: [GoldenRunner.Outcome] {
        lock.lock()
        defer { lock.unlock() }
        return outcomes.compactMap { $0 }
    }
}
