// The destination side of a live migration (`pmuvm run --incoming unix:PATH`, DESIGN §4.10).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vmm/memory/guest_ram.h"
#include "vmm/migration/migration_channel.h"
#include "vmm/snapshot/snapshot_manifest.h"
#include "vmm/snapshot/state_sections.h"

namespace vmm {

class IncomingMigration {
 public:
  // Listens at `path` (a stale socket file is replaced; one another process listens on is not:
  // MigrationError), accepts one connection and reads the
  // hello. Throws MigrationError (garbage, a dropped connection, a manifest that does not parse).
  static IncomingMigration accept_at(const std::string& path);
  // The same over a connection already accepted (and vetted), which it takes over.
  static IncomingMigration over_connection(int fd);

  const SnapshotManifest& manifest() const { return manifest_; }
  // Refuses the VM with these reasons (one per line) and closes the connection.
  void refuse(const std::vector<std::string>& reasons);
  void accept();
  // Receives RAM pages into `ram` until the state arrives; every page is bounds-checked against
  // the RAM (a page outside it is a protocol error, never a write outside the guest).
  StateSections receive(GuestRam& ram);
  // Everything that can fail is done (state loaded, threads created, sockets bound): says ready,
  // waits for the source's commit and says running. When it returns the VM is this side's to
  // run; a MigrationError (no commit by the deadline, a stop request from `stop_check`, a source
  // gone before it could hear "running") means it must not run here: the source keeps it.
  void commit(const std::function<std::optional<std::string>()>& stop_check);
  // Something failed before commit(): the source hears why (kRefuse) and keeps its VM. Best
  // effort: a source already gone needs no answer. Idempotent.
  void fail(const std::string& reason);

 private:
  IncomingMigration(std::unique_ptr<MigrationChannel> ch, SnapshotManifest m)
      : channel_(std::move(ch)), manifest_(std::move(m)) {}
  std::unique_ptr<MigrationChannel> channel_;
  SnapshotManifest manifest_;
};

}  // namespace vmm
