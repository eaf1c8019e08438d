# The desktop application (Qt 6 Widgets). Included from app/CMakeLists.txt only when Qt is found.
# Paths use CMAKE_CURRENT_LIST_DIR so this file works however it is included.
#
#   gemma_app_core   (static) controller, worker, models, store, settings, logging, engine adapter
#                    -> gemma_engine, Qt Core/Gui/Sql, spdlog       (never Qt Widgets, never ui/)
#   gemma_desk_shell (static) the composition of app core + ui views (used by main and by tests)
#   gemma-desk       (exe)    main.cpp: command line, --self-test, --help, --version

set(GEMMA_DESK_APP_DIR ${CMAKE_CURRENT_LIST_DIR})

# The bundled default model: the lead may set it for the whole build; otherwise the source tree's.
get_directory_property(_gemma_dir_definitions COMPILE_DEFINITIONS)
set(_gemma_define_default_model ON)
foreach(_definition IN LISTS _gemma_dir_definitions)
  if(_definition MATCHES "^GEMMA_DEFAULT_MODEL_PATH")
    set(_gemma_define_default_model OFF)
  endif()
endforeach()
if(NOT DEFINED GEMMA_DEFAULT_MODEL_PATH)
  set(GEMMA_DEFAULT_MODEL_PATH "${CMAKE_SOURCE_DIR}/resources/models/default.gemma")
endif()

add_library(gemma_app_core STATIC
  ${GEMMA_DESK_APP_DIR}/AppPaths.cpp
  ${GEMMA_DESK_APP_DIR}/AppSettings.cpp
  ${GEMMA_DESK_APP_DIR}/ChatModel.cpp
  ${GEMMA_DESK_APP_DIR}/ChatSession.cpp
  ${GEMMA_DESK_APP_DIR}/ConversationListModel.cpp
  ${GEMMA_DESK_APP_DIR}/ConversationStore.cpp
  ${GEMMA_DESK_APP_DIR}/EngineController.cpp
  ${GEMMA_DESK_APP_DIR}/EngineWorker.cpp
  ${GEMMA_DESK_APP_DIR}/FakeChatEngine.cpp
  ${GEMMA_DESK_APP_DIR}/GemmaEngineAdapter.cpp
  ${GEMMA_DESK_APP_DIR}/Logging.cpp
  # Headers with Q_OBJECT listed so AUTOMOC sees them.
  ${GEMMA_DESK_APP_DIR}/ChatModel.h
  ${GEMMA_DESK_APP_DIR}/ChatSession.h
  ${GEMMA_DESK_APP_DIR}/ConversationListModel.h
  ${GEMMA_DESK_APP_DIR}/EngineController.h
  ${GEMMA_DESK_APP_DIR}/EngineWorker.h)
set_target_properties(gemma_app_core PROPERTIES AUTOMOC ON)
target_include_directories(gemma_app_core PUBLIC ${GEMMA_DESK_APP_DIR})
target_link_libraries(gemma_app_core
  PUBLIC gemma_engine Qt6::Core Qt6::Gui Qt6::Sql spdlog::spdlog
  PRIVATE $<TARGET_NAME_IF_EXISTS:gemma_warnings>)
if(_gemma_define_default_model)
  target_compile_definitions(gemma_app_core PRIVATE GEMMA_DEFAULT_MODEL_PATH="${GEMMA_DEFAULT_MODEL_PATH}")
endif()

add_library(gemma_desk_shell STATIC
  ${GEMMA_DESK_APP_DIR}/DeskApplication.cpp
  ${GEMMA_DESK_APP_DIR}/DeskApplication.h
  ${GEMMA_DESK_APP_DIR}/../resources/gemma-desk.qrc)
set_target_properties(gemma_desk_shell PROPERTIES AUTOMOC ON AUTORCC ON)
target_include_directories(gemma_desk_shell PUBLIC ${GEMMA_DESK_APP_DIR})
target_link_libraries(gemma_desk_shell
  PUBLIC gemma_app_core gemma_ui Qt6::Widgets Qt6::Charts
  PRIVATE $<TARGET_NAME_IF_EXISTS:gemma_warnings>)
target_compile_definitions(gemma_desk_shell PRIVATE GEMMA_DESK_VERSION="${PROJECT_VERSION}")

add_executable(gemma-desk ${GEMMA_DESK_APP_DIR}/main.cpp)
target_link_libraries(gemma-desk PRIVATE gemma_desk_shell $<TARGET_NAME_IF_EXISTS:gemma_warnings>)
target_compile_definitions(gemma-desk PRIVATE GEMMA_DESK_VERSION="${PROJECT_VERSION}")
include(GNUInstallDirs)
install(TARGETS gemma-desk RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
