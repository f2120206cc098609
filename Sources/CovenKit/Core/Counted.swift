import Foundation

// MARK: - Counts in messages

extension BinaryInteger {
    /// The count with its noun, singular for exactly one: `1 byte`, `0 bytes`, `2 files`.
    ///
    /// Every count coven prints with a noun goes through this, so that no message says
    /// "1 bytes".
    ///
    /// - Parameters:
    ///   - noun: the singular (`byte`, `file`).
    ///   - plural: the plural when it is not the singular and an `s` (`copies`).
    /// - Returns: `"\(self) noun"` or `"\(self) nouns"`.
    public func counted(_ noun: String, plural: String? = nil) -> String {
        "\(self) " + (self == 1 ? noun : plural ?? noun + "s")
    }
}
