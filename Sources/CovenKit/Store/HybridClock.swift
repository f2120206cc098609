import Foundation

/// A hybrid logical clock: wall-clock milliseconds, a counter for writes within one millisecond
/// (or while the wall clock is behind the last stamp), and the device id to break ties. Its text
/// sorts in time order, so `_updated_at` values compare as strings (last writer wins).
///
/// `2026-11-29T11:27:37.123Z-0000-<device id>`
public enum HybridClock {
    /// The next stamp after the device's last one, recorded in `coven_meta` (call inside the
    /// write's transaction so the stamp and the write commit together).
    static func next(device: Device, now: Date = Date()) throws -> String {
        let wall = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        if let last = try device.setting("hlc"), let (lastMillis, lastCounter) = parse(last), lastMillis >= wall {
            return try keep(millis: lastMillis, counter: lastCounter + 1, device: device)
        }
        return try keep(millis: wall, counter: 0, device: device)
    }

    /// Moves the device's clock to `stamp` if it is later than its last (the receive rule,
    /// ``receive(_:)``, applied to a change from another device).
    static func advance(to stamp: String, device: Device) throws {
        if stamp > (try device.setting("hlc") ?? "") { try device.setSetting("hlc", stamp) }
    }

    /// The stamp of `millis` and `counter` on this device, recorded as its last.
    private static func keep(millis: Int64, counter: Int64, device: Device) throws -> String {
        var millis = millis, counter = counter
        // The counter is four hex digits, so that stamps compare as text: past 0xffff (a wall
        // clock set back for long), the stamp moves on to the next millisecond instead.
        if counter > 0xffff {
            millis += 1
            counter = 0
        }
        let stamp = Timestamp.iso8601(Date(timeIntervalSince1970: Double(millis) / 1000)) + "-" + String(format: "%04x", counter) + "-" + device.deviceID
        try device.setSetting("hlc", stamp)
        return stamp
    }

    /// How far past this device's wall clock a stamp received from another device may move
    /// this device's clock: 5 minutes. A device whose clock runs further ahead no longer drags
    /// every other device's stamps along; its rows keep their stamps (last writer wins is the
    /// same everywhere), and an edit of one of them is still stamped after it
    /// (``after(_:device:)``).
    public static let maximumAhead: Int64 = 5 * 60 * 1000

    /// The stamp the receive rule moves this device's clock to for `received`, the newest
    /// stamp of an applied change: `received`, or the wall clock plus ``maximumAhead`` when
    /// `received` is further ahead.
    ///
    /// - Returns: the stamp to keep, and how many milliseconds `received` is ahead of the wall
    ///   clock when it is past the bound (nil otherwise).
    static func receive(_ received: String, now: Date = Date()) -> (stamp: String, ahead: Int64?) {
        let wall = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        guard let (millis, _) = parse(received), millis > wall + maximumAhead else { return (received, nil) }
        let bound = Timestamp.iso8601(Date(timeIntervalSince1970: Double(wall + maximumAhead) / 1000)) + "-ffff-"
        return (bound, millis - wall)
    }

    /// A stamp of this device after both `floor` and its last one, kept as its last: a write
    /// that changes a row stamped `floor` (or inserts one deleted at `floor`) is stamped after
    /// it, whatever the wall clock says (causality: an edit made after seeing a row beats it).
    static func after(_ floor: String, device: Device) throws -> String {
        let base = max(floor, try device.setting("hlc") ?? "")
        guard let (millis, counter) = parse(base) else { return try next(device: device) }
        return try keep(millis: millis, counter: counter + 1, device: device)
    }

    /// How far `device`'s last change applied here was stamped ahead of this device's wall
    /// clock (milliseconds; nil when within ``maximumAhead``): `coven_clock_ahead`, whose one
    /// writer this is.
    static func ahead(of device: String, in database: Database) throws -> Int64? {
        try Journal(database: database, table: "coven_clock_ahead").value(device).flatMap { Int64($0) }
    }

    /// Records (nil: forgets) how far `device`'s last change applied here was ahead.
    static func setAhead(of device: String, _ milliseconds: Int64?, in database: Database) throws {
        try Journal(database: database, table: "coven_clock_ahead").set(device, milliseconds.map(String.init))
    }

    /// The milliseconds and counter of a stamp.
    static func parse(_ stamp: String) -> (Int64, Int64)? {
        let parts = stamp.split(separator: "-", maxSplits: 4, omittingEmptySubsequences: false)
        // 2026-11-29T11:27:37.123Z-0000-<device…>: date has two dashes of its own.
        guard parts.count >= 4 else { return nil }
        let dateText = parts[0...2].joined(separator: "-")
        guard let counter = Int64(parts[3], radix: 16) else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard let date = formatter.date(from: dateText) else { return nil }
        return (Int64((date.timeIntervalSince1970 * 1000).rounded()), counter)
    }
}
